//! `gpulens-gpu-load`: a GPU load for the real-hardware check (tests/gpu/check.sh), with no
//! CUDA toolkit at build time. It opens the driver's `libcuda.so.1` at run time, JIT-compiles
//! a one-instruction-loop PTX kernel (spin on `%clock64`), allocates and touches the device
//! memory asked for, then keeps every SM busy for `--duty` percent of each `--period-ms`
//! until `--seconds` have passed. It prints one JSON line when the memory is held and the
//! first kernel ran (`"ready"`), and one when it stops (`"done"`), so a script knows the pid,
//! the bytes and the duty cycle to compare with what NVML and nvidia-smi report.
//!
//! Without a driver it exits with status 2 and says so; with a driver that fails a call, it
//! names the call and CUDA's error.

mod cuda;
mod options;

use std::time::{Duration, Instant};

fn main() -> std::process::ExitCode {
    let opts = match options::Options::parse(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", options::HELP);
            return std::process::ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("gpulens-gpu-load: {e}\n\n{}", options::HELP);
            return std::process::ExitCode::from(64);
        }
    };
    match run(&opts) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(cuda::Error::NoDriver(why)) => {
            eprintln!(
                "gpulens-gpu-load: no NVIDIA driver here ({why}); this program needs a machine \
                 with a GPU and its driver (libcuda.so.1)"
            );
            std::process::ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("gpulens-gpu-load: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(opts: &options::Options) -> Result<(), cuda::Error> {
    let gpu = cuda::Gpu::open(opts.device)?;
    let memory = gpu.hold_memory(opts.memory_mib << 20)?;
    let spin = gpu.spin_kernel()?;
    // Calibrate: the kernel spins for a number of SM clock cycles; how many make a
    // millisecond depends on the clock the GPU runs at, so measure it and keep adjusting.
    let mut cycles_per_ms = f64::from(gpu.clock_khz().max(100_000));
    let calibration = Instant::now();
    spin.run(cycles_per_ms as u64 * 5)?;
    cycles_per_ms = (cycles_per_ms * 5.0 / ms(calibration.elapsed()).max(0.5)).max(1_000.0);
    println!(
        "{{\"event\":\"ready\",\"pid\":{},\"device\":{},\"name\":{:?},\"memory_bytes\":{},\"duty_percent\":{},\"period_ms\":{},\"seconds\":{}}}",
        std::process::id(),
        opts.device,
        gpu.name(),
        memory.bytes(),
        opts.duty_percent,
        opts.period_ms,
        opts.seconds
    );
    let start = Instant::now();
    let until = Duration::from_secs_f64(opts.seconds);
    let period = Duration::from_millis(opts.period_ms);
    let busy_per_period = period.mul_f64(opts.duty_percent / 100.0);
    let mut busy = Duration::ZERO;
    while start.elapsed() < until {
        let period_start = Instant::now();
        // Kernels of at most 20 ms, so the duty cycle holds within NVML's sampling windows.
        while period_start.elapsed() + Duration::from_micros(200) < busy_per_period {
            let left = busy_per_period - period_start.elapsed();
            let slice = ms(left).min(20.0);
            let launched = Instant::now();
            spin.run((cycles_per_ms * slice) as u64)?;
            let took = launched.elapsed();
            busy += took;
            if ms(took) > 0.2 {
                // Follow clock changes (boost, power capping) without jumping.
                let measured = cycles_per_ms * slice / ms(took);
                cycles_per_ms = 0.7 * cycles_per_ms + 0.3 * measured;
            }
        }
        if let Some(rest) = period.checked_sub(period_start.elapsed()) {
            std::thread::sleep(rest.min(until.saturating_sub(start.elapsed())));
        }
    }
    let elapsed = start.elapsed();
    println!(
        "{{\"event\":\"done\",\"pid\":{},\"seconds\":{:.3},\"busy_percent\":{:.1}}}",
        std::process::id(),
        elapsed.as_secs_f64(),
        100.0 * busy.as_secs_f64() / elapsed.as_secs_f64().max(1e-9)
    );
    drop(memory);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
