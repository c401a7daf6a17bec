//! [`metric_set!`](macro@crate::metric_set): a feature's Prometheus metrics declared once. Each
//! metric is one line — its field, type, constructor where the default will not do, exposed
//! name, unit and help — and the struct, its `Default` and its registration follow from that
//! line, so a metric cannot be declared and forgotten in the registry, or registered under a
//! field that was never built. The agent and the collector both use it; the expansion names
//! `prometheus_client`, which each of them depends on (this crate does not).

/// Declares a struct of metric families and how they are registered:
///
/// ```ignore
/// model::metric_set! {
///     /// Ingest's metrics.
///     pub struct IngestMetrics {
///         batches: Family<OutcomeLabels, Counter> => "ingest_batches", "Batches accepted";
///         lag: Histogram = Histogram::new(exponential_buckets(0.01, 4.0, 10))
///             => "ingest_lag" in Unit::Seconds, "Time from a batch's newest sample to its commit";
///     }
/// }
/// ```
///
/// gives `pub struct IngestMetrics { pub batches: …, pub lag: … }`, `Default` (each field's
/// `= constructor`, or its type's default) and `IngestMetrics::register(&mut Registry)`, which
/// registers every field in declaration order and returns the set.
#[macro_export]
macro_rules! metric_set {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident {
            $(
                $(#[$field_meta:meta])*
                $field:ident: $ty:ty $(= $init:expr)? => $metric:literal $(in $unit:expr)?, $help:literal;
            )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        $vis struct $name {
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl ::std::default::Default for $name {
            fn default() -> Self {
                $name { $( $field: $crate::metric_set!(@init $ty $(, $init)?), )* }
            }
        }

        impl $name {
            /// Builds the set and registers each of its metrics with `registry`.
            pub fn register(registry: &mut ::prometheus_client::registry::Registry) -> $name {
                let set = $name::default();
                $( $crate::metric_set!(@register registry, $metric, $help, set.$field.clone() $(, $unit)?); )*
                set
            }
        }
    };
    (@init $ty:ty) => {
        <$ty as ::std::default::Default>::default()
    };
    (@init $ty:ty, $init:expr) => {
        $init
    };
    (@register $registry:expr, $metric:expr, $help:expr, $value:expr) => {
        $registry.register($metric, $help, $value)
    };
    (@register $registry:expr, $metric:expr, $help:expr, $value:expr, $unit:expr) => {
        $registry.register_with_unit($metric, $help, $unit, $value)
    };
}

#[cfg(test)]
mod tests {
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
    use prometheus_client::registry::{Registry, Unit};

    crate::metric_set! {
        /// Two metrics, one with its own constructor and a unit.
        struct Example {
            /// Things done.
            done: Counter => "things_done", "Things done";
            took: Histogram = Histogram::new(exponential_buckets(0.5, 2.0, 3))
                => "thing_duration" in Unit::Seconds, "Time one thing took";
        }
    }

    #[test]
    fn every_declared_metric_is_registered_with_its_name_unit_help_and_constructor() {
        let mut registry = Registry::with_prefix("t");
        let set = Example::register(&mut registry);
        set.done.inc();
        set.took.observe(0.7);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("# HELP t_things_done Things done."), "{text}");
        assert!(text.contains("t_things_done_total 1"), "{text}");
        assert!(
            text.contains("# UNIT t_thing_duration_seconds seconds"),
            "{text}"
        );
        assert!(
            text.contains("# HELP t_thing_duration_seconds Time one thing took."),
            "{text}"
        );
        // The constructor's buckets, not the default ones: 0.5, 1, 2.
        assert!(
            text.contains("t_thing_duration_seconds_bucket{le=\"0.5\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("t_thing_duration_seconds_bucket{le=\"1.0\"} 1"),
            "{text}"
        );
        assert!(text.contains("t_thing_duration_seconds_count 1"), "{text}");
        // A fresh set shares nothing with the registered one.
        assert_eq!(Example::default().done.get(), 0);
    }
}
