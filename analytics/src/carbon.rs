//! Grid carbon intensity: how many grams of CO₂-equivalent a kWh drawn in a cluster emits —
//! one figure for every cluster, one per cluster, or one per cluster and hour read from a
//! file (docs/cost.md, "Emissions"). Without any, no emissions are reported.

use std::collections::BTreeMap;

use model::rollup::{HOUR_MS, bucket_of};
use serde::{Deserialize, Serialize};

/// The highest intensity taken as real, in gCO₂e/kWh: coal plants emit about 1,000; a figure
/// far beyond that is a unit mistake (kg for g).
pub const MAX_G_PER_KWH: f64 = 2_000.0;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Carbon {
    /// gCO₂e per kWh wherever no cluster or hour figure applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub g_per_kwh: Option<f64>,
    /// gCO₂e per kWh by cluster.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub clusters: BTreeMap<String, f64>,
    /// A CSV file of hourly figures (`cluster,hour,g_per_kwh`, the hour in RFC 3339, `*` for
    /// every cluster), read when the configuration is loaded; an hour it names wins over the
    /// figures above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hourly_file: Option<std::path::PathBuf>,
    /// The hourly file's figures by (cluster or `*`, hour start in ms).
    #[serde(skip)]
    pub hourly: BTreeMap<(String, i64), f64>,
}

impl Carbon {
    /// gCO₂e per kWh in `cluster` during the hour holding `ts_ms`; None where nothing is set.
    pub fn intensity(&self, cluster: &str, ts_ms: i64) -> Option<f64> {
        let hour = bucket_of(ts_ms, HOUR_MS);
        if !self.hourly.is_empty()
            && let Some(v) = self
                .hourly
                .get(&(cluster.to_owned(), hour))
                .or_else(|| self.hourly.get(&("*".to_owned(), hour)))
        {
            return Some(*v);
        }
        self.clusters.get(cluster).copied().or(self.g_per_kwh)
    }

    /// Whether any figure is set.
    pub fn is_set(&self) -> bool {
        self.g_per_kwh.is_some() || !self.clusters.is_empty() || !self.hourly.is_empty()
    }

    /// The figures, checked: each finite, at least 0 and at most [`MAX_G_PER_KWH`].
    pub fn check(&self) -> Result<(), String> {
        let bad = |v: f64| !(0.0..=MAX_G_PER_KWH).contains(&v);
        if let Some(v) = self.g_per_kwh.filter(|v| bad(*v)) {
            return Err(format!(
                "analytics.carbon.g_per_kwh = {v}: gCO2e per kWh between 0 and {MAX_G_PER_KWH}"
            ));
        }
        if let Some((c, v)) = self.clusters.iter().find(|(_, v)| bad(**v)) {
            return Err(format!(
                "analytics.carbon.clusters.{c:?} = {v}: gCO2e per kWh between 0 and {MAX_G_PER_KWH}"
            ));
        }
        Ok(())
    }

    /// Reads the hourly figures from `text` (the hourly file's contents): a header line
    /// `cluster,hour,g_per_kwh`, then one line per cluster and hour. Errors name the line.
    pub fn read_hourly(&mut self, text: &str) -> Result<(), String> {
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        match lines.next() {
            Some((_, h)) if h.trim() == "cluster,hour,g_per_kwh" => {}
            _ => return Err("the first line must be the header cluster,hour,g_per_kwh".into()),
        }
        let mut hourly = BTreeMap::new();
        for (i, line) in lines {
            let at = |what: &str| format!("line {}: {what}", i + 1);
            let mut cells = line.split(',').map(str::trim);
            let (Some(cluster), Some(hour), Some(value), None) =
                (cells.next(), cells.next(), cells.next(), cells.next())
            else {
                return Err(at("three cells expected: cluster,hour,g_per_kwh"));
            };
            if cluster.is_empty() || cluster.len() > 253 {
                return Err(at("a cluster name (or *) of 1 to 253 characters"));
            }
            let ts: jiff::Timestamp = hour
                .parse()
                .map_err(|e| at(&format!("{hour:?} is not an RFC 3339 time: {e}")))?;
            let ms = ts.as_millisecond();
            if ms % HOUR_MS != 0 {
                return Err(at(&format!("{hour} is not the start of an hour")));
            }
            let v: f64 = value
                .parse()
                .ok()
                .filter(|v: &f64| (0.0..=MAX_G_PER_KWH).contains(v))
                .ok_or_else(|| {
                    at(&format!(
                        "{value:?} is not gCO2e per kWh between 0 and {MAX_G_PER_KWH}"
                    ))
                })?;
            if hourly.insert((cluster.to_owned(), ms), v).is_some() {
                return Err(at(&format!("{cluster} at {hour} is given twice")));
            }
        }
        self.hourly = hourly;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_wins_over_a_cluster_and_a_cluster_over_everywhere() {
        let mut c = Carbon {
            g_per_kwh: Some(400.0),
            clusters: BTreeMap::from([("prod".into(), 250.0)]),
            ..Carbon::default()
        };
        c.read_hourly(
            "cluster,hour,g_per_kwh\nprod,2026-12-01T10:00:00Z,120\n*,2026-12-01T11:00:00Z,90\n",
        )
        .unwrap();
        let at = |s: &str| s.parse::<jiff::Timestamp>().unwrap().as_millisecond();
        assert_eq!(c.intensity("prod", at("2026-12-01T10:59:59Z")), Some(120.0));
        assert_eq!(c.intensity("prod", at("2026-12-01T11:30:00Z")), Some(90.0));
        assert_eq!(c.intensity("prod", at("2026-12-01T12:00:00Z")), Some(250.0));
        assert_eq!(c.intensity("lab", at("2026-12-01T12:00:00Z")), Some(400.0));
        assert_eq!(Carbon::default().intensity("lab", 0), None);
    }

    #[test]
    fn a_bad_hourly_file_is_refused_naming_the_line() {
        let mut c = Carbon::default();
        for (text, says) in [
            ("hour,g\n", "header"),
            (
                "cluster,hour,g_per_kwh\nprod,yesterday,100\n",
                "line 2: \"yesterday\"",
            ),
            (
                "cluster,hour,g_per_kwh\nprod,2026-12-01T10:30:00Z,100\n",
                "not the start of an hour",
            ),
            (
                "cluster,hour,g_per_kwh\nprod,2026-12-01T10:00:00Z,100000\n",
                "line 2: \"100000\"",
            ),
            (
                "cluster,hour,g_per_kwh\nprod,2026-12-01T10:00:00Z,1,2\n",
                "three cells",
            ),
            (
                "cluster,hour,g_per_kwh\nprod,2026-12-01T10:00:00Z,1\nprod,2026-12-01T10:00:00Z,2\n",
                "twice",
            ),
        ] {
            let e = c.read_hourly(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
        assert!(
            Carbon {
                g_per_kwh: Some(-1.0),
                ..Carbon::default()
            }
            .check()
            .is_err()
        );
    }
}
