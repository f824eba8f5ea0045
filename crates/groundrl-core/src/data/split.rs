//! Seeded splits and subsamples, keyed on sample ids.
//!
//! Both start from one random order: samples sorted by [`keyed`]`(seed, id)`. Because a sample's
//! place in that order depends only on the seed and its own id, not on its position in the file nor on
//! the other samples:
//! - [`subsample`] takes the first `n` of the order, so with one seed the 60-sample subset is contained
//!   in the 100-sample subset (prefix-stable), and a fixed validation subset survives reshuffled files;
//! - [`split`] cuts the order into consecutive parts of exactly the requested sizes (largest remainder),
//!   so the same seed and the same set of ids give the same parts.
//!
//! Output keeps the input's order within each part, so files diff cleanly against their source.

use crate::rng::keyed;

use groundrl_score::data::Sample;

/// Indices of `samples` in the seeded order (ties between equal ids broken by position).
fn seeded_order(samples: &[Sample], seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| (keyed(seed, &samples[i].id), i));
    order
}

/// A prefix-stable seeded subsample of at most `n` samples, in input order.
pub fn subsample(samples: Vec<Sample>, n: usize, seed: u64) -> Vec<Sample> {
    let mut keep = vec![false; samples.len()];
    for i in seeded_order(&samples, seed).into_iter().take(n) {
        keep[i] = true;
    }
    samples
        .into_iter()
        .zip(keep)
        .filter_map(|(s, k)| k.then_some(s))
        .collect()
}

/// Parses `train=0.9,val=0.1`: names unique, ratios positive, summing to 1 (within 1e-6).
pub fn parse_ratios(text: &str) -> Result<Vec<(String, f64)>, String> {
    let mut ratios: Vec<(String, f64)> = Vec::new();
    for part in text.split(',') {
        let (name, value) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not NAME=RATIO"))?;
        let name = name.trim();
        let ratio: f64 = value
            .trim()
            .parse()
            .map_err(|_| format!("ratio of {name:?} is not a number: {value:?}"))?;
        if name.is_empty() || !(ratio > 0.0 && ratio <= 1.0) {
            return Err(format!("{part:?}: needs a name and a ratio in (0, 1]"));
        }
        if ratios.iter().any(|(n, _)| n == name) {
            return Err(format!("split {name:?} is named twice"));
        }
        ratios.push((name.to_string(), ratio));
    }
    let sum: f64 = ratios.iter().map(|(_, r)| r).sum();
    if (sum - 1.0).abs() > 1e-6 {
        return Err(format!("ratios sum to {sum}, not 1"));
    }
    Ok(ratios)
}

/// Part sizes for `n` items: floors of `ratio * n`, the remainder given one each to the parts with
/// the largest fractional parts (earlier parts first on ties). The sizes sum to `n`.
pub fn part_sizes(n: usize, ratios: &[f64]) -> Vec<usize> {
    let exact: Vec<f64> = ratios.iter().map(|r| r * n as f64).collect();
    let mut sizes: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut by_fraction: Vec<usize> = (0..ratios.len()).collect();
    by_fraction.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let missing = n.saturating_sub(sizes.iter().sum());
    for &i in by_fraction.iter().cycle().take(missing) {
        sizes[i] += 1;
    }
    sizes
}

/// Splits `samples` into named parts of the given ratios (see the module doc), each in input order.
pub fn split(samples: Vec<Sample>, ratios: &[(String, f64)], seed: u64) -> Vec<(String, Vec<Sample>)> {
    let order = seeded_order(&samples, seed);
    let sizes = part_sizes(samples.len(), &ratios.iter().map(|(_, r)| *r).collect::<Vec<_>>());
    let mut part_of = vec![0usize; samples.len()];
    let mut start = 0;
    for (part, size) in sizes.iter().enumerate() {
        for &i in &order[start..start + size] {
            part_of[i] = part;
        }
        start += size;
    }
    let mut parts: Vec<(String, Vec<Sample>)> = ratios.iter().map(|(n, _)| (n.clone(), Vec::new())).collect();
    for (sample, part) in samples.into_iter().zip(part_of) {
        parts[part].1.push(sample);
    }
    parts
}
