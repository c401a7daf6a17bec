//! Command-line options (no argument crate: the program travels alone and stays small).

pub const HELP: &str = "\
gpulens-gpu-load: hold GPU memory and keep the SMs busy at a duty cycle (test-only)

USAGE: gpulens-gpu-load [--device N] [--memory-mib N] [--duty PERCENT] [--seconds S]
                        [--period-ms MS]

  --device N        CUDA device ordinal [default: 0]
  --memory-mib N    device memory to allocate and touch, MiB [default: 1024]
  --duty PERCENT    share of each period a kernel runs, 0-100 [default: 100]
  --seconds S       how long to run [default: 30]
  --period-ms MS    length of one on/off period, 10-10000 [default: 100]

Prints a JSON line {\"event\":\"ready\",...} once the memory is held and the first kernel ran,
and {\"event\":\"done\",...} at the end. Exit status 2: no NVIDIA driver (libcuda.so.1).
";

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub device: i32,
    pub memory_mib: usize,
    pub duty_percent: f64,
    pub seconds: f64,
    pub period_ms: u64,
}

impl Options {
    /// `Ok(None)`: help was asked for.
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Option<Options>, String> {
        let mut o = Options {
            device: 0,
            memory_mib: 1024,
            duty_percent: 100.0,
            seconds: 30.0,
            period_ms: 100,
        };
        while let Some(flag) = args.next() {
            if flag == "--help" || flag == "-h" {
                return Ok(None);
            }
            let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
            let bad = |what: &str| format!("{flag} {value:?}: {what}");
            match flag.as_str() {
                "--device" => {
                    o.device = value
                        .parse()
                        .ok()
                        .filter(|d| *d >= 0)
                        .ok_or_else(|| bad("not a device ordinal"))?
                }
                "--memory-mib" => {
                    o.memory_mib = value
                        .parse()
                        .ok()
                        .filter(|m| *m <= 1 << 22)
                        .ok_or_else(|| bad("not a size in MiB up to 4 TiB"))?
                }
                "--duty" => {
                    o.duty_percent = value
                        .parse()
                        .ok()
                        .filter(|d: &f64| (0.0..=100.0).contains(d))
                        .ok_or_else(|| bad("not a percentage from 0 to 100"))?
                }
                "--seconds" => {
                    o.seconds = value
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
                        .ok_or_else(|| bad("not a number of seconds up to a day"))?
                }
                "--period-ms" => {
                    o.period_ms = value
                        .parse()
                        .ok()
                        .filter(|p| (10..=10_000).contains(p))
                        .ok_or_else(|| bad("not a period from 10 to 10000 ms"))?
                }
                _ => return Err(format!("unknown option {flag}")),
            }
        }
        Ok(Some(o))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Option<Options>, String> {
        Options::parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn options_have_defaults_and_bounds() {
        let o = parse("").unwrap().unwrap();
        assert_eq!((o.device, o.memory_mib, o.period_ms), (0, 1024, 100));
        let o = parse("--memory-mib 2048 --duty 50 --seconds 5")
            .unwrap()
            .unwrap();
        assert_eq!((o.memory_mib, o.duty_percent, o.seconds), (2048, 50.0, 5.0));
        assert_eq!(parse("--help").unwrap(), None);
        for bad in [
            "--duty 101",
            "--duty x",
            "--seconds -1",
            "--seconds NaN",
            "--period-ms 5",
            "--device -1",
            "--memory-mib",
            "--frobnicate 1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
