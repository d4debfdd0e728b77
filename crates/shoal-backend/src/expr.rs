//! A small integer expression language for constraint rules and FLOP counts.
//!
//! A tuning spec says which parameter combinations make sense (`BM * BN <= 16384`,
//! `K % BK == 0`) and how much work one run does (`2 * M * N * K`). Both are written in this
//! language, so that a spec needs no scripting runtime and every rule can be checked when the
//! spec is loaded: it must parse, and every name in it must be a parameter or a shape column.
//!
//! The language is C's integer arithmetic without assignment:
//!
//! - integer literals (`64`, `1_024`), identifiers (`BM`, `K`);
//! - unary `-` and `!`;
//! - binary `* / %`, then `+ -`, then `< <= > >=`, then `== !=`, then `&&`, then `||`
//!   (tightest first, all left-associative, as in C);
//! - parentheses.
//!
//! Values are `i64`. Comparisons and logical operators yield `0` or `1`; `&&` and `||`
//! short-circuit and treat any non-zero value as true. Arithmetic is checked: an overflow or a
//! division by zero is an [`EvalError`], which makes a rule false and a FLOP count unknown
//! rather than producing a wrong number.
//!
//! Nesting is limited to [`MAX_DEPTH`] levels, counting both the parser's recursion
//! (parentheses, unary operators) and the depth of the tree it builds (a chain of `+` is a
//! left-deep tree): parsing, evaluating, printing and dropping are all recursive, and a spec
//! is untrusted input, so `((((…1…))))` twenty thousand deep must be a parse error, never a
//! stack overflow.

use std::fmt;

/// The deepest an expression may nest: parentheses, unary operators and operator chains
/// together. Real rules nest a handful of levels; this leaves room and keeps every recursive
/// walk far from the end of even a small (2 MiB) thread stack.
pub const MAX_DEPTH: usize = 64;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    Num(i64),
    Var(String),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    Mul,
    Div,
    Rem,
    Add,
    Sub,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    And,
    Or,
}

impl BinOp {
    fn symbol(self) -> &'static str {
        match self {
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Rem => "%",
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }

    /// Binding strength; higher binds tighter.
    fn precedence(self) -> u8 {
        match self {
            BinOp::Mul | BinOp::Div | BinOp::Rem => 6,
            BinOp::Add | BinOp::Sub => 5,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
            BinOp::Eq | BinOp::Ne => 3,
            BinOp::And => 2,
            BinOp::Or => 1,
        }
    }
}

/// A parse error at a byte offset into the expression text.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("at offset {offset}: {message}")]
pub struct ExprError {
    pub offset: usize,
    pub message: String,
}

/// Why an expression has no value for some parameter values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    #[error("`{0}` has no integer value")]
    Unknown(String),
    #[error("division by zero")]
    DivisionByZero,
    #[error("integer overflow")]
    Overflow,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Num(i64),
    Ident(String),
    Op(BinOp),
    Not,
    LParen,
    RParen,
}

fn tokenize(text: &str) -> Result<Vec<(usize, Tok)>, ExprError> {
    let bytes = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    let err = |offset, message: String| ExprError { offset, message };
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let digits: String = text[start..i].chars().filter(|&c| c != '_').collect();
            let n = digits
                .parse::<i64>()
                .map_err(|_| err(start, format!("bad integer `{}`", &text[start..i])))?;
            toks.push((start, Tok::Num(n)));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            toks.push((start, Tok::Ident(text[start..i].to_string())));
            continue;
        }
        let two = text.get(i..i + 2).unwrap_or("");
        let (tok, len) = match two {
            "<=" => (Tok::Op(BinOp::Le), 2),
            ">=" => (Tok::Op(BinOp::Ge), 2),
            "==" => (Tok::Op(BinOp::Eq), 2),
            "!=" => (Tok::Op(BinOp::Ne), 2),
            "&&" => (Tok::Op(BinOp::And), 2),
            "||" => (Tok::Op(BinOp::Or), 2),
            _ => match c {
                b'*' => (Tok::Op(BinOp::Mul), 1),
                b'/' => (Tok::Op(BinOp::Div), 1),
                b'%' => (Tok::Op(BinOp::Rem), 1),
                b'+' => (Tok::Op(BinOp::Add), 1),
                b'-' => (Tok::Op(BinOp::Sub), 1),
                b'<' => (Tok::Op(BinOp::Lt), 1),
                b'>' => (Tok::Op(BinOp::Gt), 1),
                b'!' => (Tok::Not, 1),
                b'(' => (Tok::LParen, 1),
                b')' => (Tok::RParen, 1),
                b'=' => return Err(err(start, "`=` is not an operator; use `==`".into())),
                _ => {
                    let ch = text[start..].chars().next().unwrap_or('?');
                    return Err(err(start, format!("unexpected character `{ch}`")));
                }
            },
        };
        toks.push((start, tok));
        i += len;
    }
    Ok(toks)
}

struct Parser {
    toks: Vec<(usize, Tok)>,
    pos: usize,
    end: usize,
    /// Parentheses and unary operators open now: the parser's own recursion.
    nesting: usize,
}

/// A parsed subtree and its depth (a leaf is 1).
type Node = (Expr, usize);

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(_, t)| t)
    }

    fn offset(&self) -> usize {
        self.toks.get(self.pos).map(|(o, _)| *o).unwrap_or(self.end)
    }

    fn error(&self, message: impl Into<String>) -> ExprError {
        ExprError {
            offset: self.offset(),
            message: message.into(),
        }
    }

    fn too_deep(&self) -> ExprError {
        self.error(format!(
            "the expression nests deeper than {MAX_DEPTH} levels (the limit); simplify it"
        ))
    }

    /// A new node over children of depth `below`, unless that passes the limit.
    fn node(&self, expr: Expr, below: usize) -> Result<Node, ExprError> {
        if below >= MAX_DEPTH {
            return Err(self.too_deep());
        }
        Ok((expr, below + 1))
    }

    /// Enters a parenthesis or a unary operator: one more level of the parser's recursion.
    fn enter(&mut self) -> Result<(), ExprError> {
        if self.nesting >= MAX_DEPTH {
            return Err(self.too_deep());
        }
        self.nesting += 1;
        Ok(())
    }

    /// Precedence climbing: parses operators that bind at least as tightly as `min`.
    fn binary(&mut self, min: u8) -> Result<Node, ExprError> {
        let (mut lhs, mut depth) = self.unary()?;
        while let Some(Tok::Op(op)) = self.peek() {
            let op = *op;
            if op.precedence() < min {
                break;
            }
            self.pos += 1;
            let (rhs, rhs_depth) = self.binary(op.precedence() + 1)?;
            (lhs, depth) = self.node(
                Expr::Binary(op, Box::new(lhs), Box::new(rhs)),
                depth.max(rhs_depth),
            )?;
        }
        Ok((lhs, depth))
    }

    fn unary(&mut self) -> Result<Node, ExprError> {
        let op = match self.peek() {
            Some(Tok::Op(BinOp::Sub)) => UnOp::Neg,
            Some(Tok::Not) => UnOp::Not,
            _ => return self.primary(),
        };
        self.enter()?;
        self.pos += 1;
        let (inner, depth) = self.unary()?;
        self.nesting -= 1;
        self.node(Expr::Unary(op, Box::new(inner)), depth)
    }

    fn primary(&mut self) -> Result<Node, ExprError> {
        let tok = self.peek().cloned();
        match tok {
            Some(Tok::Num(n)) => {
                self.pos += 1;
                Ok((Expr::Num(n), 1))
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                Ok((Expr::Var(name), 1))
            }
            Some(Tok::LParen) => {
                self.enter()?;
                self.pos += 1;
                let inner = self.binary(0)?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(self.error("expected `)`"));
                }
                self.pos += 1;
                self.nesting -= 1;
                Ok(inner)
            }
            Some(Tok::RParen) => Err(self.error("unexpected `)`")),
            Some(Tok::Op(op)) => Err(self.error(format!(
                "expected a number, a name or `(`, found `{}`",
                op.symbol()
            ))),
            Some(Tok::Not) => unreachable!("handled by unary"),
            None => Err(self.error("unexpected end of expression")),
        }
    }
}

impl Expr {
    /// Parses an expression; the error's offset is a byte offset into `text`.
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let toks = tokenize(text)?;
        if toks.is_empty() {
            return Err(ExprError {
                offset: 0,
                message: "empty expression".into(),
            });
        }
        let mut p = Parser {
            toks,
            pos: 0,
            end: text.len(),
            nesting: 0,
        };
        let (e, _depth) = p.binary(0)?;
        if p.pos < p.toks.len() {
            return Err(p.error("expected an operator or the end of the expression"));
        }
        Ok(e)
    }

    /// Every identifier the expression names, in order of first appearance, without repeats.
    pub fn idents(&self) -> Vec<String> {
        fn walk(e: &Expr, out: &mut Vec<String>) {
            match e {
                Expr::Num(_) => {}
                Expr::Var(v) => {
                    if !out.contains(v) {
                        out.push(v.clone());
                    }
                }
                Expr::Unary(_, a) => walk(a, out),
                Expr::Binary(_, a, b) => {
                    walk(a, out);
                    walk(b, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(self, &mut out);
        out
    }

    /// Evaluates with `lookup` giving the value of each identifier.
    pub fn eval(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> Result<i64, EvalError> {
        match self {
            Expr::Num(n) => Ok(*n),
            Expr::Var(v) => lookup(v).ok_or_else(|| EvalError::Unknown(v.clone())),
            Expr::Unary(UnOp::Neg, a) => a.eval(lookup)?.checked_neg().ok_or(EvalError::Overflow),
            Expr::Unary(UnOp::Not, a) => Ok((a.eval(lookup)? == 0) as i64),
            Expr::Binary(BinOp::And, a, b) => {
                Ok((a.eval(lookup)? != 0 && b.eval(lookup)? != 0) as i64)
            }
            Expr::Binary(BinOp::Or, a, b) => {
                Ok((a.eval(lookup)? != 0 || b.eval(lookup)? != 0) as i64)
            }
            Expr::Binary(op, a, b) => {
                let (x, y) = (a.eval(lookup)?, b.eval(lookup)?);
                let checked = |v: Option<i64>| v.ok_or(EvalError::Overflow);
                match op {
                    BinOp::Add => checked(x.checked_add(y)),
                    BinOp::Sub => checked(x.checked_sub(y)),
                    BinOp::Mul => checked(x.checked_mul(y)),
                    BinOp::Div | BinOp::Rem if y == 0 => Err(EvalError::DivisionByZero),
                    BinOp::Div => checked(x.checked_div(y)),
                    BinOp::Rem => checked(x.checked_rem(y)),
                    BinOp::Lt => Ok((x < y) as i64),
                    BinOp::Le => Ok((x <= y) as i64),
                    BinOp::Gt => Ok((x > y) as i64),
                    BinOp::Ge => Ok((x >= y) as i64),
                    BinOp::Eq => Ok((x == y) as i64),
                    BinOp::Ne => Ok((x != y) as i64),
                    BinOp::And | BinOp::Or => unreachable!("short-circuited above"),
                }
            }
        }
    }

    /// True when the expression evaluates to a non-zero value; any evaluation error is false.
    pub fn holds(&self, lookup: &dyn Fn(&str) -> Option<i64>) -> bool {
        matches!(self.eval(lookup), Ok(v) if v != 0)
    }
}

impl fmt::Display for Expr {
    /// Fully parenthesised, so that the printed form re-parses to the same tree.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Num(n) => write!(f, "{n}"),
            Expr::Var(v) => f.write_str(v),
            Expr::Unary(UnOp::Neg, a) => write!(f, "(-{a})"),
            Expr::Unary(UnOp::Not, a) => write!(f, "(!{a})"),
            Expr::Binary(op, a, b) => write!(f, "({a} {} {b})", op.symbol()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str, vars: &[(&str, i64)]) -> Result<i64, EvalError> {
        let lookup = |n: &str| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| *v);
        Expr::parse(text).unwrap().eval(&lookup)
    }

    #[test]
    fn precedence_is_c_like() {
        assert_eq!(eval("1 + 2 * 3", &[]), Ok(7));
        assert_eq!(eval("(1 + 2) * 3", &[]), Ok(9));
        assert_eq!(eval("10 - 4 - 3", &[]), Ok(3));
        assert_eq!(eval("100 / 10 / 5", &[]), Ok(2));
        assert_eq!(eval("7 % 4 * 2", &[]), Ok(6));
        assert_eq!(eval("1 + 1 == 2 && 3 < 2 || 1", &[]), Ok(1));
        assert_eq!(eval("1 < 2 == 1", &[]), Ok(1));
        assert_eq!(eval("-2 * -3", &[]), Ok(6));
        assert_eq!(eval("!0 + !5", &[]), Ok(1));
        assert_eq!(eval("1_024 / 2", &[]), Ok(512));
    }

    #[test]
    fn rules_with_variables() {
        let v = [("BM", 64), ("BN", 128), ("K", 256), ("BK", 32)];
        assert_eq!(eval("BM * BN <= 16384", &v), Ok(1));
        assert_eq!(eval("BM * BN < 8192", &v), Ok(0));
        assert_eq!(eval("K % BK == 0 && BM != BN", &v), Ok(1));
        assert_eq!(eval("2 * BM * BN * K", &v), Ok(4_194_304));
        assert_eq!(eval("X + 1", &v), Err(EvalError::Unknown("X".into())));
    }

    #[test]
    fn checked_arithmetic() {
        assert_eq!(eval("1 / 0", &[]), Err(EvalError::DivisionByZero));
        assert_eq!(eval("1 % (2 - 2)", &[]), Err(EvalError::DivisionByZero));
        assert_eq!(
            eval("9223372036854775807 + 1", &[]),
            Err(EvalError::Overflow)
        );
        assert_eq!(
            eval("-9223372036854775807 - 2", &[]),
            Err(EvalError::Overflow)
        );
        // Short-circuit: the right side is never evaluated.
        assert_eq!(eval("0 && 1 / 0", &[]), Ok(0));
        assert_eq!(eval("1 || X", &[]), Ok(1));
        let e = Expr::parse("1 / 0 == 0").unwrap();
        assert!(!e.holds(&|_| None));
    }

    #[test]
    fn idents_in_order_without_repeats() {
        let e = Expr::parse("BM * BN <= 16384 && BM >= K").unwrap();
        assert_eq!(e.idents(), vec!["BM", "BN", "K"]);
    }

    #[test]
    fn errors_carry_offsets() {
        let e = Expr::parse("BM * ").unwrap_err();
        assert_eq!(e.offset, 5);
        let e = Expr::parse("BM = 4").unwrap_err();
        assert_eq!(e.offset, 3);
        assert!(e.message.contains("=="));
        let e = Expr::parse("(BM + 1").unwrap_err();
        assert_eq!(e.offset, 7);
        let e = Expr::parse("BM BN").unwrap_err();
        assert_eq!(e.offset, 3);
        let e = Expr::parse("BM # 2").unwrap_err();
        assert_eq!(e.offset, 3);
        assert!(Expr::parse("   ").is_err());
        assert!(Expr::parse("12abc").is_err());
        assert!(Expr::parse("99999999999999999999").is_err());
        assert!(Expr::parse(")").is_err());
        assert!(Expr::parse("* 2").is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        const N: usize = 20_000;
        let parens = format!("{}1{}", "(".repeat(N), ")".repeat(N));
        let negs = format!("{}1", "-".repeat(N));
        let nots = format!("{}1", "!(".repeat(N)) + &")".repeat(N);
        let chain = vec!["1"; N].join(" + ");
        let right = format!("{}1{}", "1 + (".repeat(N), ")".repeat(N));
        for text in [&parens, &negs, &nots, &chain, &right] {
            let e = Expr::parse(text).unwrap_err();
            assert!(
                e.message
                    .contains(&format!("deeper than {MAX_DEPTH} levels")),
                "{}",
                e.message
            );
            // The error points at where the limit was passed, not at the end.
            assert!(e.offset < 2_000, "offset {}", e.offset);
        }
    }

    #[test]
    fn nesting_up_to_the_limit_parses_and_evaluates() {
        let parens = format!("{}7{}", "(".repeat(MAX_DEPTH), ")".repeat(MAX_DEPTH));
        assert_eq!(eval(&parens, &[]), Ok(7));
        let negs = format!("{}7", "-".repeat(MAX_DEPTH - 1));
        assert_eq!(eval(&negs, &[]), Ok(-7));
        let chain = vec!["1"; MAX_DEPTH].join(" + ");
        assert_eq!(eval(&chain, &[]), Ok(MAX_DEPTH as i64));
        let over = vec!["1"; MAX_DEPTH + 1].join(" + ");
        assert!(Expr::parse(&over).is_err());
    }

    #[test]
    fn display_round_trips() {
        for text in ["1 + 2 * 3", "!(BM < 4) || -K % 3 != 0", "a && b || c"] {
            let e = Expr::parse(text).unwrap();
            assert_eq!(Expr::parse(&e.to_string()).unwrap(), e);
        }
    }
}
