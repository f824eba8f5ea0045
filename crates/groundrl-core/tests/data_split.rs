//! Seeded subsamples and splits: determinism, prefix stability, exact sizes, no overlap.

use groundrl_core::data::split::{parse_ratios, part_sizes, split, subsample};
use groundrl_score::data::{ImageRef, Sample, Task};
use groundrl_score::frame::Frame;

fn samples(n: usize) -> Vec<Sample> {
    (0..n)
        .map(|i| Sample {
            id: format!("s{i}"),
            source: "synth/test".into(),
            task: Task::BoxGrounding,
            images: vec![ImageRef {
                path: format!("{i}.png"),
                width: 10,
                height: 10,
            }],
            instruction: "x".into(),
            targets: vec![],
            frame: Frame::Pixel,
            none: true,
            prompt: vec![],
            metadata: Default::default(),
        })
        .collect()
}

fn ids(samples: &[Sample]) -> Vec<String> {
    samples.iter().map(|s| s.id.clone()).collect()
}

#[test]
fn subsample_is_seeded_prefix_stable_and_in_input_order() {
    let all = samples(500);
    let small = ids(&subsample(all.clone(), 60, 42));
    let large = ids(&subsample(all.clone(), 100, 42));
    assert_eq!(small.len(), 60);
    assert_eq!(large.len(), 100);
    assert!(
        small.iter().all(|id| large.contains(id)),
        "the 60 are among the 100"
    );
    assert_eq!(
        small,
        ids(&subsample(all.clone(), 60, 42)),
        "same seed, same subset"
    );
    assert_ne!(
        small,
        ids(&subsample(all.clone(), 60, 43)),
        "another seed, another subset"
    );
    let positions: Vec<usize> = small.iter().map(|id| id[1..].parse().unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "input order kept");
    // Independent of file order: a reversed file gives the same ids.
    let mut reversed = all.clone();
    reversed.reverse();
    let mut from_reversed = ids(&subsample(reversed, 60, 42));
    from_reversed.reverse();
    assert_eq!(from_reversed, small);
    assert_eq!(subsample(all, 1000, 1).len(), 500);
}

#[test]
fn part_sizes_use_largest_remainders() {
    assert_eq!(part_sizes(10, &[0.9, 0.1]), vec![9, 1]);
    assert_eq!(part_sizes(7, &[0.5, 0.25, 0.25]), vec![3, 2, 2]);
    assert_eq!(part_sizes(2, &[1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0]), vec![1, 1, 0]);
    assert_eq!(part_sizes(0, &[0.5, 0.5]), vec![0, 0]);
}

#[test]
fn split_partitions_exactly_and_deterministically() {
    let ratios = parse_ratios("train=0.8,val=0.1,test=0.1").unwrap();
    let parts = split(samples(103), &ratios, 7);
    let sizes: Vec<(String, usize)> = parts.iter().map(|(n, s)| (n.clone(), s.len())).collect();
    assert_eq!(
        sizes,
        vec![("train".into(), 83), ("val".into(), 10), ("test".into(), 10)]
    );
    let mut all: Vec<String> = parts.iter().flat_map(|(_, s)| ids(s)).collect();
    all.sort();
    let mut expected = ids(&samples(103));
    expected.sort();
    assert_eq!(all, expected, "every sample in exactly one part");
    let again = split(samples(103), &ratios, 7);
    assert_eq!(ids(&again[1].1), ids(&parts[1].1));
    assert_ne!(ids(&split(samples(103), &ratios, 8)[1].1), ids(&parts[1].1));
}

#[test]
fn ratio_parsing_rejects_bad_input() {
    assert_eq!(
        parse_ratios("a=0.5, b=0.5").unwrap(),
        vec![("a".into(), 0.5), ("b".into(), 0.5)]
    );
    for bad in [
        "a=0.5",
        "a=0.5,a=0.5",
        "a=x,b=1",
        "a",
        "=1",
        "a=-0.5,b=1.5",
        "a=NaN",
    ] {
        assert!(parse_ratios(bad).is_err(), "{bad}");
    }
}
