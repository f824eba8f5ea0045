//! `groundrl data` end to end on the core crate's fixtures.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{command, groundrl, ids, json_lines, text};

fn fixture(relative: &str) -> PathBuf {
    common::core_fixture("data").join(relative)
}

#[test]
fn convert_reports_skipped_records_and_per_source_counts() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ss.jsonl");
    let input = fixture("screenspot/screenspot_mobile.json");
    let images = fixture("screenspot/images");
    let o = groundrl(&[
        "data",
        "convert",
        "--from",
        "screenspot",
        "--input",
        input.to_str().unwrap(),
        "--images",
        images.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("screenspot_mobile.json: 2 samples, 2 bad records skipped"),
        "{stdout}"
    );
    assert!(stdout.contains("  screenspot/mobile: 2"), "{stdout}");
    let stderr = text(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "screenspot_mobile.json: record 2: img_filename: {} does not exist",
            images.join("missing.png").display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("record 3: bbox:"), "{stderr}");
    assert_eq!(ids(&out), ["screenspot/mobile/0", "screenspot/mobile/1"]);

    let strict = groundrl(&[
        "data",
        "convert",
        "--from",
        "screenspot",
        "--input",
        input.to_str().unwrap(),
        "--images",
        images.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
        "--strict",
    ]);
    assert!(!strict.status.success());
    assert!(
        text(&strict.stderr).contains("--strict"),
        "{}",
        text(&strict.stderr)
    );
}

#[test]
fn coco_through_parquet_matches_direct_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let input = fixture("coco/instances_val2017.json");
    let (direct, parquet, back) = (
        dir.path().join("d.jsonl"),
        dir.path().join("val.parquet"),
        dir.path().join("b.jsonl"),
    );
    for (from, input, output) in [
        ("coco", input.as_path(), direct.as_path()),
        ("coco", input.as_path(), parquet.as_path()),
        ("parquet", parquet.as_path(), back.as_path()),
    ] {
        let o = groundrl(&[
            "data",
            "convert",
            "--from",
            from,
            "--input",
            input.to_str().unwrap(),
            "--output",
            output.to_str().unwrap(),
            "--subset",
            "pos_3",
            "--mode",
            "positive",
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    assert_eq!(
        std::fs::read_to_string(&direct).unwrap(),
        std::fs::read_to_string(&back).unwrap()
    );
    assert_eq!(
        ids(&direct),
        ["coco/val2017/2", "coco/val2017/3", "coco/val2017/5"]
    );
}

#[test]
fn split_and_sample_are_seeded() {
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.jsonl");
    let input = fixture("coco/instances_val2017.json");
    let o = groundrl(&[
        "data",
        "convert",
        "--from",
        "coco",
        "--input",
        input.to_str().unwrap(),
        "--output",
        all.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));

    let parts = dir.path().join("parts");
    let o = groundrl(&[
        "data",
        "split",
        "--input",
        all.to_str().unwrap(),
        "--out-dir",
        parts.to_str().unwrap(),
        "--ratios",
        "train=0.6,val=0.4",
        "--seed",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let (train, val) = (ids(&parts.join("train.jsonl")), ids(&parts.join("val.jsonl")));
    assert_eq!((train.len(), val.len()), (3, 2));
    assert!(train.iter().all(|id| !val.contains(id)));

    let sample = |n: &str, out: &str| {
        let path = dir.path().join(out);
        let o = groundrl(&[
            "data",
            "sample",
            "--input",
            all.to_str().unwrap(),
            "--n",
            n,
            "--seed",
            "9",
            "--output",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        ids(&path)
    };
    let (two, two_again, four) = (
        sample("2", "a.jsonl"),
        sample("2", "b.jsonl"),
        sample("4", "c.jsonl"),
    );
    assert_eq!(two, two_again);
    assert_eq!(four.len(), 4);
    assert!(two.iter().all(|id| four.contains(id)));

    let bad = groundrl(&[
        "data",
        "split",
        "--input",
        all.to_str().unwrap(),
        "--out-dir",
        "x",
        "--ratios",
        "a=0.5",
        "--seed",
        "1",
    ]);
    assert!(!bad.status.success());
    assert!(
        text(&bad.stderr).contains("ratios sum to 0.5"),
        "{}",
        text(&bad.stderr)
    );
}

fn groundrl_in(dir: &Path, args: &[&str]) -> Output {
    command().current_dir(dir).args(args).output().unwrap()
}

/// A sample line asking about `path`, stated `w` x `h`.
fn sample_line(id: &str, path: &str, (w, h): (u32, u32)) -> String {
    serde_json::json!({
        "id": id, "source": "s", "task": "point_grounding",
        "images": [{"path": path, "width": w, "height": h}],
        "instruction": "open", "targets": [{"shape": {"type": "point", "coords": [1.0, 1.0]}}],
        "frame": "pixel", "none": false, "metadata": {}
    })
    .to_string()
}

/// A PNG of `w` x `h` with varied pixels.
fn png(w: u32, h: u32) -> Vec<u8> {
    let img = image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x * 7) as u8, (y * 5) as u8, (x ^ y) as u8])
    });
    let mut bytes = Vec::new();
    img.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png)
        .unwrap();
    bytes
}

/// The PNG `bytes` with its header declaring `w` x `h` (a decompression bomb's header: the
/// pixel data is not read before the size is refused).
fn with_declared_size(mut bytes: Vec<u8>, w: u32, h: u32) -> Vec<u8> {
    bytes[16..20].copy_from_slice(&w.to_be_bytes());
    bytes[20..24].copy_from_slice(&h.to_be_bytes());
    let crc = crc32(&bytes[12..29]);
    bytes[29..33].copy_from_slice(&crc.to_be_bytes());
    bytes
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn check_confines_image_paths_and_reports_every_bad_image() {
    let dir = tempfile::tempdir().unwrap();
    let (root, data) = (dir.path(), dir.path().join("data"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("a.png"), png(40, 30)).unwrap();
    std::fs::write(data.join("bad.png"), b"not a png").unwrap();
    std::fs::write(root.join("secret.png"), png(40, 30)).unwrap();
    std::fs::write(
        data.join("bomb.png"),
        with_declared_size(png(40, 30), 16_000, 16_000),
    )
    .unwrap();
    std::os::unix::fs::symlink(root.join("secret.png"), data.join("link.png")).unwrap();
    let secret = root.join("secret.png").display().to_string();
    let lines = [
        sample_line("ok", "a.png", (40, 30)),
        sample_line("up", "../secret.png", (40, 30)),
        sample_line("abs", &secret, (40, 30)),
        sample_line("link", "link.png", (40, 30)),
        sample_line("dev", "/dev/zero", (40, 30)),
        sample_line("bad", "bad.png", (40, 30)),
        sample_line("bomb", "bomb.png", (16_000, 16_000)),
    ];
    std::fs::write(data.join("s.jsonl"), lines.join("\n")).unwrap();
    let check = |extra: &[&str]| {
        let mut args = vec![
            "data",
            "check",
            "--input",
            "data/s.jsonl",
            "--previews",
            "prev",
            "--n-previews",
            "7",
        ];
        args.extend_from_slice(extra);
        groundrl_in(root, &args)
    };
    let o = check(&[]);
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    let issues: Vec<&str> = stdout.lines().take_while(|l| !l.starts_with("checked")).collect();
    let resolved = |name: &str| root.join(name).canonicalize().unwrap().display().to_string();
    assert_eq!(
        issues,
        [
            "up (s): refused-path: \"../secret.png\" steps up with `..`, outside data".to_string(),
            format!("abs (s): refused-path: \"{secret}\" is absolute, outside data"),
            format!(
                "link (s): refused-path: \"link.png\" leads through a symlink to {}, outside data",
                resolved("secret.png")
            ),
            "dev (s): refused-path: \"/dev/zero\" is absolute, outside data".to_string(),
            format!(
                "bad (s): undecodable-image: {}: Format error decoding Png: Invalid PNG signature.",
                resolved("data/bad.png")
            ),
            format!(
                "bomb (s): image-too-large: {}: 16000x16000 is 256000000 pixels, more than the decoding budget of 67108864",
                resolved("data/bomb.png")
            ),
        ]
    );
    assert!(
        stdout.contains("checked 7 samples from data/s.jsonl: 6 issues, 0 unreadable records"),
        "{stdout}"
    );
    assert!(stdout.contains("  refused-path\ts\t4\n"), "{stdout}");
    // Each unreadable image costs its own preview only.
    assert!(stdout.contains("wrote 1 previews to prev, 6 failed"), "{stdout}");
    let stderr = text(&o.stderr);
    assert_eq!(stderr.matches("preview skipped: sample ").count(), 6, "{stderr}");
    assert!(
        stderr.contains("preview skipped: sample up: no preview: \"../secret.png\" steps up"),
        "{stderr}"
    );

    // Asked for, paths outside are read; /dev never is, and the budget can be raised or lowered.
    let o = check(&["--allow-outside-paths", "--max-image-pixels", "1199"]);
    let stdout = text(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("dev (s): refused-path: \"/dev/zero\" is /dev/zero: files under /dev are never read"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("image-too-large: ").count(), 5, "{stdout}");
    assert!(
        stdout.contains("40x30 is 1200 pixels, more than the decoding budget of 1199"),
        "{stdout}"
    );
    assert!(!stdout.contains("steps up"), "{stdout}");
    let o = check(&["--allow-outside-paths"]);
    let stdout = text(&o.stdout);
    assert!(
        stdout.contains("checked 7 samples from data/s.jsonl: 3 issues"),
        "{stdout}"
    );
    assert!(stdout.contains("wrote 4 previews to prev, 3 failed"), "{stdout}");
}

/// A copy of the ScreenSpot fixture (annotations and images) under `root/raw`.
fn screenspot_copy(root: &Path) {
    let raw = root.join("raw/images");
    std::fs::create_dir_all(&raw).unwrap();
    for name in ["mobile_1.png", "mobile_2.png"] {
        std::fs::copy(fixture(&format!("screenspot/images/{name}")), raw.join(name)).unwrap();
    }
    std::fs::copy(
        fixture("screenspot/screenspot_mobile.json"),
        root.join("raw/screenspot_mobile.json"),
    )
    .unwrap();
}

fn image_paths(path: &Path) -> Vec<String> {
    json_lines(path)
        .iter()
        .map(|v| v["images"][0]["path"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn convert_split_and_sample_write_image_paths_relative_to_the_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    screenspot_copy(root);
    let convert = |from: &str, input: &str, output: &str| {
        let o = groundrl_in(
            root,
            &[
                "data",
                "convert",
                "--from",
                from,
                "--input",
                input,
                "--images",
                "raw/images",
                "--output",
                output,
            ],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        text(&o.stdout)
    };
    let stdout = convert("screenspot", "raw/screenspot_mobile.json", "raw/ss.jsonl");
    assert!(!stdout.contains("note:"), "{stdout}");
    assert_eq!(
        image_paths(&root.join("raw/ss.jsonl")),
        ["images/mobile_1.png", "images/mobile_2.png"]
    );
    let check = groundrl_in(root, &["data", "check", "--input", "raw/ss.jsonl"]);
    assert_eq!(check.status.code(), Some(0), "{}", text(&check.stdout));

    // A sample file converted into a subfolder: paths follow it, and leave it by `..`.
    let stdout = convert("jsonl", "raw/ss.jsonl", "raw/sub/copy.jsonl");
    assert!(
        stdout.contains("note: 2 image paths lead out of raw/sub (`..`); readers refuse them unless given --allow-outside-paths"),
        "{stdout}"
    );
    let copy = root.join("raw/sub/copy.jsonl");
    assert_eq!(
        image_paths(&copy),
        ["../images/mobile_1.png", "../images/mobile_2.png"]
    );
    let refused = groundrl_in(root, &["data", "check", "--input", "raw/sub/copy.jsonl"]);
    assert_eq!(refused.status.code(), Some(1));
    assert!(text(&refused.stdout).contains("  refused-path\tscreenspot/mobile\t2\n"));
    let allowed = groundrl_in(
        root,
        &[
            "data",
            "check",
            "--input",
            "raw/sub/copy.jsonl",
            "--allow-outside-paths",
        ],
    );
    assert_eq!(allowed.status.code(), Some(0), "{}", text(&allowed.stdout));

    // Split and sample write their files where they are told, the paths following them.
    let o = groundrl_in(
        root,
        &[
            "data",
            "split",
            "--input",
            "raw/ss.jsonl",
            "--out-dir",
            "raw/parts",
            "--ratios",
            "a=0.5,b=0.5",
            "--seed",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut parts = [
        image_paths(&root.join("raw/parts/a.jsonl")),
        image_paths(&root.join("raw/parts/b.jsonl")),
    ]
    .concat();
    parts.sort();
    assert_eq!(parts, ["../images/mobile_1.png", "../images/mobile_2.png"]);
    let o = groundrl_in(
        root,
        &[
            "data",
            "sample",
            "--input",
            "raw/sub/copy.jsonl",
            "--n",
            "2",
            "--seed",
            "1",
            "--output",
            "raw/two.jsonl",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let mut two = image_paths(&root.join("raw/two.jsonl"));
    two.sort();
    assert_eq!(two, ["images/mobile_1.png", "images/mobile_2.png"]);
}

#[test]
fn convert_screenspot_decodes_images_whole_so_truncated_files_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    screenspot_copy(root);
    let image = root.join("raw/images/mobile_2.png");
    let bytes = std::fs::read(&image).unwrap();
    // The header (with the size) survives; the pixel data does not.
    std::fs::write(&image, &bytes[..bytes.len() - 30]).unwrap();
    let o = groundrl_in(
        root,
        &[
            "data",
            "convert",
            "--from",
            "screenspot",
            "--input",
            "raw/screenspot_mobile.json",
            "--images",
            "raw/images",
            "--output",
            "raw/ss.jsonl",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("1 samples, 3 bad records skipped"),
        "{}",
        text(&o.stdout)
    );
    let stderr = text(&o.stderr);
    let resolved = image.canonicalize().unwrap();
    assert!(
        stderr.contains(&format!(
            "raw/screenspot_mobile.json: record 1: img_filename: {}: ",
            resolved.display()
        )),
        "{stderr}"
    );
    assert_eq!(ids(&root.join("raw/ss.jsonl")), ["screenspot/mobile/0"]);
}

/// `groundrl synth` draws a held-out variety: the dialog layout alone in the ocean theme, worded
/// without "Click" or "Find"; an unknown layout is refused with the ones it takes.
#[test]
fn synth_draws_the_layouts_themes_and_wording_asked() {
    let dir = tempfile::tempdir().unwrap();
    let held_out = dir.path().join("held-out");
    let args = [
        "--n",
        "6",
        "--difficulty",
        "easy",
        "--layouts",
        "dialog",
        "--themes",
        "ocean",
        "--wording",
        "paraphrased",
    ];
    let samples = json_lines(&common::synth(&held_out, &args));
    assert!(samples.len() >= 6);
    for s in &samples {
        assert_eq!(s["source"], "synth/dialog", "{s}");
        assert_eq!(s["metadata"]["theme"], "ocean", "{s}");
        let instruction = s["instruction"].as_str().unwrap();
        assert!(
            !instruction.starts_with("Click") && !instruction.starts_with("Find"),
            "{s}"
        );
    }
    let bad = groundrl(&[
        "synth",
        "--out",
        &common::path(&dir.path().join("bad")),
        "--n",
        "1",
        "--layouts",
        "form",
    ]);
    assert!(!bad.status.success());
    let stderr = text(&bad.stderr);
    assert!(
        stderr.contains("--layouts: unknown layout \"form\"; expected one of toolbar, dialog, list"),
        "{stderr}"
    );
}
