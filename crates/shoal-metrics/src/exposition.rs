//! The two text formats a scrape may ask for. Prometheus asks for OpenMetrics in its `Accept`
//! header, and that is what `prometheus-client` writes. Anything else (`curl`, `promtool check
//! metrics`, older scrapers) gets the classic text format, version 0.0.4: there a counter's
//! HELP and TYPE name the sample (`shoal_store_outages_total`), where OpenMetrics names the
//! family (`shoal_store_outages`). Read in the other format's terms, each counter would have no
//! HELP, which is what `promtool` said before the formats were told apart.

/// A text format of the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    OpenMetrics,
    /// Prometheus's classic text format, version 0.0.4.
    Text,
}

impl Exposition {
    /// The format a scrape's `Accept` header asks for: OpenMetrics when it names it (with
    /// any positive quality), the classic text format otherwise.
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        let wants_openmetrics = accept.is_some_and(|accept| {
            accept.split(',').any(|range| {
                let mut parts = range.split(';').map(str::trim);
                let media = parts.next().unwrap_or("");
                let refused = parts.any(|p| {
                    p.strip_prefix("q=")
                        .and_then(|q| q.parse::<f64>().ok())
                        .is_some_and(|q| q <= 0.0)
                });
                media.eq_ignore_ascii_case("application/openmetrics-text") && !refused
            })
        });
        if wants_openmetrics {
            Exposition::OpenMetrics
        } else {
            Exposition::Text
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Exposition::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// OpenMetrics text (as `prometheus-client` writes it) in the classic text format: a counter
/// family's HELP and TYPE name its `_total` sample, `unknown` is `untyped`, and the `# UNIT`
/// and `# EOF` lines, which the classic format does not have, are left out.
pub fn openmetrics_to_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .filter(|(_, kind)| kind.trim() == "counter")
        .map(|(name, _)| name)
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let renamed = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            let tail = if *prefix == "# TYPE " && tail.trim() == "unknown" {
                "untyped"
            } else {
                tail
            };
            let suffix = if counters.contains(name) {
                "_total"
            } else {
                ""
            };
            Some(format!("{prefix}{name}{suffix} {tail}"))
        });
        match renamed {
            Some(l) => out.push_str(&l),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_gets_openmetrics_and_everyone_else_the_classic_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                          version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(
            Exposition::negotiate(Some(prometheus)),
            Exposition::OpenMetrics
        );
        assert_eq!(Exposition::negotiate(None), Exposition::Text);
        assert_eq!(Exposition::negotiate(Some("*/*")), Exposition::Text);
        assert_eq!(
            Exposition::negotiate(Some("application/openmetrics-text;q=0")),
            Exposition::Text
        );
    }

    #[test]
    fn counters_are_named_by_their_samples_in_the_classic_format() {
        let om = "# HELP shoal_outages Outages.\n# TYPE shoal_outages counter\n\
                  shoal_outages_total 3\n# HELP shoal_jobs Jobs.\n# TYPE shoal_jobs gauge\n\
                  shoal_jobs{state=\"new\"} 2\n# TYPE shoal_x unknown\nshoal_x 1\n\
                  # UNIT shoal_jobs jobs\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP shoal_outages_total Outages.\n# TYPE shoal_outages_total counter\n\
             shoal_outages_total 3\n# HELP shoal_jobs Jobs.\n# TYPE shoal_jobs gauge\n\
             shoal_jobs{state=\"new\"} 2\n# TYPE shoal_x untyped\nshoal_x 1\n"
        );
    }
}
