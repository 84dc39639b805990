//! Printing the selected samples: an aligned `kind name value` table for people, or a
//! JSON array for scripts. Pure.

use crate::shared::prometheus_text::Sample;

/// The rows as an aligned table with the header `kind name value`, one row a line.
pub fn render_table(rows: &[&Sample]) -> String {
    let table: Vec<[String; 3]> = std::iter::once(["kind".into(), "name".into(), "value".into()])
        .chain(
            rows.iter()
                .map(|s| [s.kind.to_string(), s.display_name(), s.value.clone()]),
        )
        .collect();
    let width = |col: usize| {
        table
            .iter()
            .map(|r| r[col].chars().count())
            .max()
            .unwrap_or(0)
    };
    let (kind_w, name_w) = (width(0), width(1));
    let mut out = String::new();
    for [kind, name, value] in &table {
        out.push_str(&format!("{kind:<kind_w$}  {name:<name_w$}  {value}\n"));
    }
    out
}

/// The rows as a JSON array of `{"kind", "name", "labels", "value"}`. `labels` is an
/// object; `value` is a JSON integer or number, or a string for `+Inf`, `-Inf` and `NaN`,
/// which JSON cannot hold as numbers.
pub fn render_json(rows: &[&Sample]) -> String {
    let items: Vec<serde_json::Value> = rows
        .iter()
        .map(|s| {
            let labels: serde_json::Map<String, serde_json::Value> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            serde_json::json!({
                "kind": s.kind.as_str(),
                "name": s.name,
                "labels": labels,
                "value": s.json_value(),
            })
        })
        .collect();
    serde_json::Value::Array(items).to_string()
}
