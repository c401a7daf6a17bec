//! What every feature's metrics are made of. Each feature owns its metrics (a struct of typed
//! families registered on the collector's one registry at start-up; no string names at call
//! sites), and `/metrics` serves the registry. Label values are bounded enums.

use prometheus_client::registry::Registry;

/// A gauge holding a float.
pub type FGauge = prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>;

/// Gives an enum of label values its snake_case text, as Prometheus convention has it.
#[macro_export]
macro_rules! snake_label {
    ($t:ty { $($v:ident => $s:literal),* $(,)? }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(Self::$v => $s),* }
            }
        }
        impl prometheus_client::encoding::EncodeLabelValue for $t {
            fn encode(
                &self,
                encoder: &mut prometheus_client::encoding::LabelValueEncoder,
            ) -> Result<(), std::fmt::Error> {
                std::fmt::Write::write_str(encoder, self.as_str())
            }
        }
    };
}
pub use crate::snake_label;

/// The collector's registry: every name starts with `gpulens_`.
pub fn registry() -> Registry {
    Registry::with_prefix("gpulens")
}

/// A registry in the OpenMetrics text format (ending in `# EOF`).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry).expect("writing to a String");
    out
}

pub use model::exposition::to_prometheus_text;
