//! Command templates: argv elements with `{NAME}` placeholders.
//!
//! A command is split into argv elements first (on whitespace, or given as an array) and the
//! placeholders are substituted inside each element afterwards, so a value never splits into
//! two arguments and no shell ever sees it. `{{` and `}}` stand for literal braces.

/// One piece of an argv element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Lit(String),
    Var(String),
}

/// One argv element as literal text and placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template(pub Vec<Piece>);

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Template {
    /// Parses one argv element; the error names the problem and its byte offset.
    pub fn parse(text: &str) -> Result<Template, (usize, String)> {
        let mut pieces = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        let mut offset = 0;
        while let Some(c) = rest.chars().next() {
            if rest.starts_with("{{") || rest.starts_with("}}") {
                lit.push(c);
                rest = &rest[2..];
                offset += 2;
                continue;
            }
            if c == '{' {
                let close = rest.find('}').filter(|&i| is_ident(&rest[1..i]));
                let Some(close) = close else {
                    return Err((
                        offset,
                        format!(
                            "stray `{{` in `{text}`: placeholders are `{{NAME}}`, a literal brace is `{{{{`"
                        ),
                    ));
                };
                if !lit.is_empty() {
                    pieces.push(Piece::Lit(std::mem::take(&mut lit)));
                }
                pieces.push(Piece::Var(rest[1..close].to_string()));
                rest = &rest[close + 1..];
                offset += close + 1;
                continue;
            }
            lit.push(c);
            rest = &rest[c.len_utf8()..];
            offset += c.len_utf8();
        }
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit));
        }
        Ok(Template(pieces))
    }

    /// The placeholder names, in order.
    pub fn vars(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|p| match p {
            Piece::Var(v) => Some(v.as_str()),
            Piece::Lit(_) => None,
        })
    }

    /// Substitutes every placeholder that `lookup` knows; an unknown one is left as `{NAME}`.
    pub fn render(&self, lookup: &dyn Fn(&str) -> Option<String>) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Lit(s) => out.push_str(s),
                Piece::Var(v) => match lookup(v) {
                    Some(value) => out.push_str(&value),
                    None => {
                        out.push('{');
                        out.push_str(v);
                        out.push('}');
                    }
                },
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_render() {
        let t = Template::parse("-DBM={BM}x{{lit}}{BN}").unwrap();
        assert_eq!(t.vars().collect::<Vec<_>>(), vec!["BM", "BN"]);
        let lookup = |n: &str| (n == "BM").then(|| "64".to_string());
        assert_eq!(t.render(&lookup), "-DBM=64x{lit}{BN}");
        assert_eq!(Template::parse("plain").unwrap().render(&|_| None), "plain");
        assert!(Template::parse("a{ b}").is_err());
        assert_eq!(Template::parse("ab{").unwrap_err().0, 2);
        assert!(Template::parse("{1x}").is_err());
    }
}
