//! [`Row`]: one measured figure, ours against a baseline, and its two output forms.

use std::fmt::Write as _;

/// One line of the results: a metric of one scenario, ours next to a baseline measured in the
/// same run. Lower is better for every metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The scenario's registry name (`seed`, `precision`, …).
    pub scenario: &'static str,
    /// What was measured (`close_ms`, `overshoot_p99`, …).
    pub metric: &'static str,
    /// childguard's figure.
    pub ours: f64,
    /// The baseline's figure.
    pub baseline: f64,
    /// What the baseline is, including anything unusual about how it was measured.
    pub baseline_name: String,
    /// The unit of `ours` and `baseline`.
    pub unit: &'static str,
}

impl Row {
    /// `ours / baseline`, to 4 significant digits (a ratio of 3e-5 must not print as 0);
    /// `None` when the baseline is zero (or not a number).
    pub fn ratio(&self) -> Option<f64> {
        let ratio = self.ours / self.baseline;
        ratio
            .is_finite()
            .then(|| format!("{ratio:.3e}").parse().unwrap_or(ratio))
    }

    /// One JSON object on one line, with the keys `scenario`, `metric`, `ours`, `baseline`,
    /// `baseline_name`, `ratio`, `unit` in that order. Figures are rounded to 3 decimals (µs for
    /// `ms`), the ratio to 4 significant digits; a ratio that cannot be computed is `null`.
    pub fn to_json_line(&self) -> String {
        format!(
            "{{\"scenario\":{},\"metric\":{},\"ours\":{},\"baseline\":{},\"baseline_name\":{},\"ratio\":{},\"unit\":{}}}",
            json_string(self.scenario),
            json_string(self.metric),
            json_number(self.ours),
            json_number(self.baseline),
            json_string(&self.baseline_name),
            self.ratio().map_or_else(|| "null".to_string(), json_exact),
            json_string(self.unit),
        )
    }
}

/// Rows as a markdown table with the same columns as the JSON form.
pub fn markdown_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | metric | ours | baseline | baseline_name | ratio | unit |\n\
         |---|---|---:|---:|---|---:|---|\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {} | {} | {} |",
            row.scenario,
            row.metric,
            row.ours,
            row.baseline,
            row.baseline_name.replace('|', "\\|"),
            row.ratio()
                .map_or_else(|| "–".to_string(), |r| r.to_string()),
            row.unit,
        );
    }
    out
}

fn json_string(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

/// A finite number rounded to 3 decimals; `null` otherwise (JSON has no NaN).
fn json_number(x: f64) -> String {
    json_exact((x * 1000.0).round() / 1000.0)
}

/// A finite number as is; `null` otherwise.
fn json_exact(x: f64) -> String {
    serde_json::Number::from_f64(x).map_or_else(|| "null".to_string(), |n| n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            scenario: "seed",
            metric: "close_ms",
            ours: 1.23456,
            baseline: 10_000.0,
            baseline_name: "waitpid-only \"close\"".into(),
            unit: "ms",
        }
    }

    #[test]
    fn json_has_exactly_the_keys_in_order() {
        let line = row().to_json_line();
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let keys: Vec<&String> = value.as_object().unwrap().keys().collect();
        let mut want = vec![
            "baseline",
            "baseline_name",
            "metric",
            "ours",
            "ratio",
            "scenario",
            "unit",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert!(line.starts_with("{\"scenario\":\"seed\",\"metric\":\"close_ms\",\"ours\":1.235,"));
        assert_eq!(value["ratio"], serde_json::json!(0.0001235));
        let table = markdown_table(&[row()]);
        assert!(table.contains("| 0.0001235 |"), "{table}");
        assert_eq!(value["baseline_name"], "waitpid-only \"close\"");
    }

    #[test]
    fn zero_baseline_gives_null_ratio() {
        let mut r = row();
        r.baseline = 0.0;
        assert_eq!(r.ratio(), None);
        assert!(r.to_json_line().contains("\"ratio\":null"));
        assert!(markdown_table(&[r]).contains("| – |"));
    }
}
