//! Metrics exposition formats shared by the collector and the agent.

/// OpenMetrics text as the Prometheus text format (0.0.4), for scrapers that do not ask for
/// OpenMetrics and for `promtool check metrics`: counters are described under their `_total`
/// sample name, `# UNIT` and `# EOF` are dropped.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let rewritten = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let rest = line.strip_prefix(p)?;
            let (name, tail) = rest.split_once(' ')?;
            counters
                .contains(name)
                .then(|| format!("{p}{name}_total {tail}"))
        });
        out.push_str(rewritten.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_their_total_names() {
        let om = "# HELP x_requests Requests.\n# TYPE x_requests counter\n# UNIT x_requests requests\nx_requests_total 3\n# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\nx_requests_total 3\n# HELP x_up Up.\n# TYPE x_up gauge\nx_up 1\n"
        );
    }
}
