//! `groundrl smart-resize`: the documented JSON on stdout, and exit code 2 with a message for sizes
//! the processor refuses.

use crate::common;

use common::command;

fn smart_resize(args: &[&str]) -> std::process::Output {
    command().arg("smart-resize").args(args).output().unwrap()
}

#[test]
fn prints_size_grid_and_tokens_in_order() {
    let out = smart_resize(&["--height", "1080", "--width", "1920"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"height\":1092,\"width\":1932,\"grid\":[1,78,138],\"image_tokens\":2691}\n"
    );
}

#[test]
fn honours_the_pixel_budget() {
    let out = smart_resize(&["--height", "1080", "--width", "1920", "--max-pixels", "1003520"]);
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "{\"height\":728,\"width\":1316,\"grid\":[1,52,94],\"image_tokens\":1222}\n"
    );
}

#[test]
fn refuses_zero_and_elongated_sizes_with_exit_code_2() {
    for (h, w, message) in [("0", "1920", "zero side"), ("10", "2010", "aspect ratio 201.0")] {
        let out = smart_resize(&["--height", h, "--width", w]);
        assert_eq!(out.status.code(), Some(2), "{h}x{w}");
        assert!(out.stdout.is_empty());
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(message), "{err}");
    }
}
