//! Without an NVIDIA driver the load says so and exits 2 (the check treats that as "no GPU
//! load", not as a crash). Skipped where a driver is installed.

#[test]
fn without_a_driver_the_load_exits_2_and_says_why() {
    let has_driver = [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    if has_driver {
        return;
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpulens-gpu-load"))
        .args(["--seconds", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no NVIDIA driver here"), "{err}");
    assert!(out.stdout.is_empty(), "no ready line without a GPU");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gpulens-gpu-load"))
        .args(["--duty", "150"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}
