//! What every feature's metrics are made of. Each feature owns its metrics (a struct of typed
//! families registered on the collector's one registry at start-up; no string names at call
//! sites), and `/metrics` serves the registry. Label values are bounded enums.

use prometheus_client::registry::Registry;

/// A gauge holding a float.
pub type FGauge = prometheus_client::metrics::gauge::Gauge<f64, std::sync::atomic::AtomicU64>;

/// Gives an enum of label values its snake_case text, as Prometheus convention has it.
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
pub(crate) use snake_label;

/// Registers a feature's metric families in one list, each a field of the feature's metrics
/// struct with its name, unit (`in Unit::Seconds`, where it has one) and help:
///
/// ```ignore
/// register!(registry, m,
///     batches => "ingest_batches", "Batches accepted, by outcome";
///     lag => "ingest_lag" in Unit::Seconds, "Time from a batch's newest sample to its commit";
/// );
/// ```
macro_rules! register {
    ($registry:expr, $m:expr, $($field:ident => $name:literal $(in $unit:expr)?, $help:literal;)*) => {{
        $( $crate::metrics::register!(@one $registry, $name, $help, $m.$field.clone() $(, $unit)?); )*
    }};
    (@one $r:expr, $name:expr, $help:expr, $metric:expr) => {
        $r.register($name, $help, $metric)
    };
    (@one $r:expr, $name:expr, $help:expr, $metric:expr, $unit:expr) => {
        $r.register_with_unit($name, $help, $unit, $metric)
    };
}
pub(crate) use register;

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
