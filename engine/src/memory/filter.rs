//! Metadata filters of the memory store: comparisons on JSON paths, combined with
//! and / or / not, evaluated on an item's metadata document.
//!
//! Owns filter semantics only; which rows are read is the store's business.

use serde_json::Value as Json;

/// A filter on an item's metadata (a JSON object). Paths are dot-separated keys
/// (`"user.tier"`); a path that does not exist makes every comparison false (and `Exists`
/// false, `Ne` true).
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// The value at the path equals the given value (numbers compare as numbers).
    Eq(String, Json),
    /// The value at the path is missing or differs.
    Ne(String, Json),
    /// Greater than (numbers with numbers, strings with strings).
    Gt(String, Json),
    /// Greater than or equal.
    Gte(String, Json),
    /// Less than.
    Lt(String, Json),
    /// Less than or equal.
    Lte(String, Json),
    /// The value equals one of these.
    In(String, Vec<Json>),
    /// The array at the path holds this value, or the string at the path contains this
    /// string.
    Contains(String, Json),
    /// The path exists (its value may be `null`).
    Exists(String),
    /// Every one holds (true when empty).
    And(Vec<Filter>),
    /// Any one holds (false when empty).
    Or(Vec<Filter>),
    /// The negation.
    Not(Box<Filter>),
}

impl Filter {
    /// `path == value`.
    pub fn eq(path: &str, value: impl Into<Json>) -> Filter {
        Filter::Eq(path.into(), value.into())
    }

    /// Checks the filter's shape: non-empty paths without empty segments, comparable
    /// operands for ordering comparisons. Bad filters are refused before any row is read.
    pub fn validate(&self) -> Result<(), String> {
        let path_ok = |p: &str| {
            if p.is_empty() || p.split('.').any(str::is_empty) {
                Err(format!("bad metadata path '{p}'"))
            } else {
                Ok(())
            }
        };
        match self {
            Filter::Eq(p, _) | Filter::Ne(p, _) | Filter::Contains(p, _) | Filter::In(p, _) => {
                path_ok(p)
            }
            Filter::Exists(p) => path_ok(p),
            Filter::Gt(p, v) | Filter::Gte(p, v) | Filter::Lt(p, v) | Filter::Lte(p, v) => {
                path_ok(p)?;
                if v.is_number() || v.is_string() {
                    Ok(())
                } else {
                    Err(format!(
                        "'{p}': an ordering comparison needs a number or a string, not {v}"
                    ))
                }
            }
            Filter::And(fs) | Filter::Or(fs) => fs.iter().try_for_each(Filter::validate),
            Filter::Not(f) => f.validate(),
        }
    }

    /// Whether `doc` (an item's metadata; `Null` when it has none) passes.
    pub fn matches(&self, doc: &Json) -> bool {
        use std::cmp::Ordering as O;
        let at = |p: &str| lookup(doc, p);
        let ord = |p: &str, v: &Json, ok: fn(O) -> bool| {
            at(p).and_then(|x| compare(x, v)).is_some_and(ok)
        };
        match self {
            Filter::Eq(p, v) => at(p).is_some_and(|x| equal(x, v)),
            Filter::Ne(p, v) => !at(p).is_some_and(|x| equal(x, v)),
            Filter::Gt(p, v) => ord(p, v, |o| o == O::Greater),
            Filter::Gte(p, v) => ord(p, v, |o| o != O::Less),
            Filter::Lt(p, v) => ord(p, v, |o| o == O::Less),
            Filter::Lte(p, v) => ord(p, v, |o| o != O::Greater),
            Filter::In(p, vs) => at(p).is_some_and(|x| vs.iter().any(|v| equal(x, v))),
            Filter::Contains(p, v) => match (at(p), v) {
                (Some(Json::Array(a)), v) => a.iter().any(|x| equal(x, v)),
                (Some(Json::String(s)), Json::String(needle)) => s.contains(needle.as_str()),
                _ => false,
            },
            Filter::Exists(p) => at(p).is_some(),
            Filter::And(fs) => fs.iter().all(|f| f.matches(doc)),
            Filter::Or(fs) => fs.iter().any(|f| f.matches(doc)),
            Filter::Not(f) => !f.matches(doc),
        }
    }
}

/// The value at a dot-separated path.
fn lookup<'a>(doc: &'a Json, path: &str) -> Option<&'a Json> {
    path.split('.').try_fold(doc, |v, key| v.as_object()?.get(key))
}

/// Equality with numbers compared by value (`1` equals `1.0`).
fn equal(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Order of two numbers or two strings; other pairs do not compare.
fn compare(a: &Json, b: &Json) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Json::String(x), Json::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_operator_on_nested_paths() {
        let doc = json!({"user": {"tier": "gold", "age": 41}, "tags": ["a", "b"], "note": "likes tea", "n": null});
        let t = |f: Filter| f.matches(&doc);
        assert!(t(Filter::eq("user.tier", "gold")));
        assert!(t(Filter::eq("user.age", 41.0)));
        assert!(!t(Filter::eq("user.missing", 1)));
        assert!(t(Filter::Ne("user.tier".into(), json!("silver"))));
        assert!(t(Filter::Ne("nope".into(), json!(1))));
        assert!(t(Filter::Gt("user.age".into(), json!(40))));
        assert!(!t(Filter::Gt("user.age".into(), json!(41))));
        assert!(t(Filter::Gte("user.age".into(), json!(41))));
        assert!(t(Filter::Lt("user.tier".into(), json!("silver"))));
        assert!(t(Filter::Lte("user.age".into(), json!(41))));
        assert!(!t(Filter::Lt("user.age".into(), json!("x")))); // mixed types never order
        assert!(t(Filter::In("user.tier".into(), vec![json!("x"), json!("gold")])));
        assert!(t(Filter::Contains("tags".into(), json!("b"))));
        assert!(t(Filter::Contains("note".into(), json!("tea"))));
        assert!(!t(Filter::Contains("tags".into(), json!("c"))));
        assert!(t(Filter::Exists("n".into())));
        assert!(!t(Filter::Exists("user.tier.x".into())));
        assert!(t(Filter::And(vec![
            Filter::eq("user.tier", "gold"),
            Filter::Exists("tags".into())
        ])));
        assert!(t(Filter::Or(vec![Filter::eq("user.tier", "x"), Filter::eq("user.age", 41)])));
        assert!(t(Filter::Not(Box::new(Filter::eq("user.tier", "x")))));
        assert!(!Filter::eq("a", 1).matches(&Json::Null));
    }

    #[test]
    fn bad_filters_are_refused() {
        assert!(Filter::eq("", 1).validate().is_err());
        assert!(Filter::eq("a..b", 1).validate().is_err());
        assert!(Filter::Gt("a".into(), json!([1])).validate().is_err());
        assert!(Filter::And(vec![Filter::Exists("a.".into())]).validate().is_err());
        assert!(Filter::Gt("a".into(), json!(1)).validate().is_ok());
    }
}
