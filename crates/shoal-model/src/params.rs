//! An ordered list of named parameter values, with one canonical text form.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Named values in a fixed order (the order of the spec or of the shape columns).
///
/// Values are kept as text: a shape column or a tile size prints exactly as the user wrote it,
/// and [`Params::get_i64`] reads integers for constraint rules and FLOP counts.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Params(pub Vec<(String, String)>);

impl Params {
    pub fn new() -> Self {
        Params(Vec::new())
    }

    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn get_i64(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(|v| v.trim().parse().ok())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|(n, _)| n.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Concatenation of two parameter lists (compile-time then run-time, say).
    pub fn chain(&self, other: &Params) -> Params {
        let mut all = self.clone();
        all.0.extend(other.0.iter().cloned());
        all
    }

    /// The canonical key: `name=value` pairs joined by `,`, in order. Two parameter sets are the
    /// same candidate exactly when their keys are equal.
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// Parses the canonical key written by [`Params::key`].
    pub fn from_key(key: &str) -> Option<Params> {
        if key.is_empty() {
            return Some(Params::new());
        }
        let mut p = Params::new();
        for pair in key.split(',') {
            let (n, v) = pair.split_once('=')?;
            p.push(n, v);
        }
        Some(p)
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}={v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trips_and_keeps_order() {
        let mut p = Params::new();
        p.push("BM", "64");
        p.push("BN", "32");
        assert_eq!(p.key(), "BM=64,BN=32");
        assert_eq!(Params::from_key(&p.key()).unwrap(), p);
        assert_eq!(p.get_i64("BN"), Some(32));
        assert_eq!(p.get("XX"), None);
        assert_eq!(Params::from_key("").unwrap(), Params::new());
        assert!(Params::from_key("nokey").is_none());
    }
}
