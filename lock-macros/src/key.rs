//! Key templates: `"order:<order_id>"`, `"{tenant:<order.tenant>}:<order.id>"`.
//!
//! A template is split at compile time into text and placeholders. A
//! placeholder names a parameter (or `self`) and optionally a chain of
//! fields; its value is written with `Display`. Braces are plain text, so
//! Redis Cluster hash tags pass through. `<<` and `>>` stand for a literal
//! `<` and `>`, as `{{` and `}}` do in `format!`.

use std::ops::Range;

use proc_macro2::Span;
use syn::ext::IdentExt as _;
use syn::parse::Parser as _;
use syn::{Ident, Index, LitStr, Member};

use crate::attr::Errors;

/// A parsed key template.
pub(crate) struct Template {
    pub(crate) pieces: Vec<Piece>,
}

pub(crate) enum Piece {
    Text(String),
    Value(Placeholder),
}

/// `<root.field.field>`.
pub(crate) struct Placeholder {
    /// The parameter, as written (`self`, `order`, `r#type`).
    pub(crate) root: Ident,
    pub(crate) fields: Vec<Member>,
    /// The placeholder's text without the angle brackets, for messages.
    pub(crate) text: String,
    /// Where the placeholder is: inside the literal when the compiler can
    /// point there, otherwise the whole literal.
    pub(crate) span: Span,
}

impl Template {
    pub(crate) fn placeholders(&self) -> impl Iterator<Item = &Placeholder> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Value(placeholder) => Some(placeholder),
            Piece::Text(_) => None,
        })
    }
}

/// Parses the template in `lit`, reporting every problem in it at once.
pub(crate) fn parse(lit: &LitStr) -> syn::Result<Template> {
    let value = lit.value();
    let mut errors = Errors::default();
    if value.is_empty() {
        errors.push(syn::Error::new(
            lit.span(),
            "the lock key is empty: name the lock, like `key = \"order:<order_id>\"`",
        ));
        return errors.finish().map(|()| Template { pieces: Vec::new() });
    }

    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut i = 0;
    while let Some(c) = value[i..].chars().next() {
        let next = value[i + c.len_utf8()..].chars().next();
        match (c, next) {
            ('<', Some('<')) | ('>', Some('>')) => {
                text.push(c);
                i += 2;
            }
            ('<', _) => {
                let inner_start = i + 1;
                let close = value[inner_start..]
                    .find(['<', '>'])
                    .map(|at| inner_start + at);
                let Some(close) = close.filter(|&at| value[at..].starts_with('>')) else {
                    errors.push(syn::Error::new(
                        span(lit, i..i + 1),
                        "unclosed `<` in the lock key: close the placeholder with `>`, \
                         or write `<<` for a literal `<`",
                    ));
                    i += 1;
                    continue;
                };
                let inner = &value[inner_start..close];
                let at = span(lit, i..close + 1);
                match placeholder(inner, at) {
                    Ok(placeholder) => {
                        if !text.is_empty() {
                            pieces.push(Piece::Text(std::mem::take(&mut text)));
                        }
                        pieces.push(Piece::Value(placeholder));
                    }
                    Err(message) => errors.push(syn::Error::new(at, message)),
                }
                i = close + 1;
            }
            ('>', _) => {
                errors.push(syn::Error::new(
                    span(lit, i..i + 1),
                    "`>` without a matching `<` in the lock key: \
                     write `>>` for a literal `>`",
                ));
                i += 1;
            }
            _ => {
                text.push(c);
                i += c.len_utf8();
            }
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    errors.finish().map(|()| Template { pieces })
}

/// Parses the inside of `<...>`.
fn placeholder(inner: &str, span: Span) -> Result<Placeholder, String> {
    const EXPECTED: &str = "write a parameter name, optionally followed by fields, like `<order_id>` or `<order.customer.id>`";
    if inner.is_empty() {
        return Err(format!(
            "empty placeholder `<>` in the lock key: {EXPECTED}; \
             write `<<` for a literal `<`"
        ));
    }
    if inner.contains('(') {
        return Err(format!(
            "`<{inner}>`: placeholders cannot call methods; {EXPECTED}, whose value is written with `Display`"
        ));
    }
    if inner.chars().any(char::is_whitespace) {
        return Err(format!(
            "`<{inner}>`: no spaces inside placeholders; {EXPECTED}"
        ));
    }
    let mut segments = inner.split('.');
    let root = segments
        .next()
        .and_then(|root| ident(root, span))
        .ok_or_else(|| format!("`<{inner}>` does not start with a parameter name; {EXPECTED}"))?;
    let fields = segments
        .map(|field| member(field, span))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| format!("`<{inner}>` is not a valid field path; {EXPECTED}"))?;
    Ok(Placeholder {
        root,
        fields,
        text: inner.to_owned(),
        span,
    })
}

/// An identifier (`self`, `order`, `r#type`, or a keyword used as a field).
fn ident(text: &str, span: Span) -> Option<Ident> {
    let mut ident = Ident::parse_any.parse_str(text).ok()?;
    // `parse_str` skips comments; make sure nothing but the identifier was there.
    if ident != text {
        return None;
    }
    if text != "self" && syn::parse_str::<Ident>(text).is_err() {
        // A keyword (`type`, `match`) works as a name only in its raw form,
        // which `self`, `Self`, `super`, `crate` and `_` do not have.
        if matches!(text, "Self" | "super" | "crate" | "_") {
            return None;
        }
        ident = Ident::new_raw(text, span);
    }
    ident.set_span(span);
    Some(ident)
}

/// A field: a name or a tuple index.
fn member(text: &str, span: Span) -> Option<Member> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        // `01` is not a tuple index.
        if text.len() > 1 && text.starts_with('0') {
            return None;
        }
        let index = text.parse().ok()?;
        return Some(Member::Unnamed(Index { index, span }));
    }
    if text == "self" {
        return None;
    }
    ident(text, span).map(Member::Named)
}

/// The span of `range` (byte offsets into the literal's value) inside `lit`.
///
/// Pointing inside a literal needs `Literal::subspan`, which only nightly
/// compilers implement for proc macros; on stable this is the whole literal.
/// Offsets into the value match offsets into the source only for a plain
/// literal without escapes, so anything else also gets the whole literal.
pub(crate) fn span(lit: &LitStr, range: Range<usize>) -> Span {
    let token = lit.token();
    let source = token.to_string();
    let plain = source
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .is_some_and(|inner| inner == lit.value());
    if !plain {
        return lit.span();
    }
    token
        .subspan(range.start + 1..range.end + 1)
        .unwrap_or_else(|| lit.span())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(text: &str) -> LitStr {
        LitStr::new(text, Span::call_site())
    }

    /// The template as `text` and `<root.field>` pieces, joined by `|`.
    fn pieces(text: &str) -> String {
        let template = parse(&lit(text)).unwrap_or_else(|e| panic!("{text:?}: {e}"));
        template
            .pieces
            .iter()
            .map(|piece| match piece {
                Piece::Text(text) => text.clone(),
                Piece::Value(p) => {
                    let fields: Vec<String> = p
                        .fields
                        .iter()
                        .map(|member| match member {
                            Member::Named(ident) => ident.to_string(),
                            Member::Unnamed(index) => index.index.to_string(),
                        })
                        .collect();
                    format!(
                        "<{}>",
                        [vec![p.root.to_string()], fields].concat().join(".")
                    )
                }
            })
            .collect::<Vec<_>>()
            .join("|")
    }

    fn error(text: &str) -> String {
        match parse(&lit(text)) {
            Ok(_) => panic!("{text:?} should be rejected"),
            Err(err) => crate::messages(err),
        }
    }

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(pieces("order:<order_id>"), "order:|<order_id>");
        assert_eq!(pieces("<a>"), "<a>");
        assert_eq!(pieces("<a>:<b>"), "<a>|:|<b>");
        assert_eq!(pieces("<a><b>"), "<a>|<b>");
        assert_eq!(pieces("plain"), "plain");
        assert_eq!(pieces("<self.tenant>-x"), "<self.tenant>|-x");
    }

    #[test]
    fn follows_fields_and_tuple_indices() {
        assert_eq!(pieces("<order.customer.id>"), "<order.customer.id>");
        assert_eq!(pieces("<pair.0>/<pair.1>"), "<pair.0>|/|<pair.1>");
        assert_eq!(pieces("<x.type>"), "<x.r#type>");
        assert_eq!(pieces("<r#type>"), "<r#type>");
    }

    #[test]
    fn braces_pass_through() {
        assert_eq!(
            pieces("{tenant:<t>}:order:<id>"),
            "{tenant:|<t>|}:order:|<id>"
        );
        assert_eq!(pieces("{}{{x}}"), "{}{{x}}");
    }

    #[test]
    fn doubled_angle_brackets_are_literal() {
        assert_eq!(pieces("a<<b>>c"), "a<b>c");
        assert_eq!(pieces("<<<x>"), "<|<x>");
    }

    #[test]
    fn keeps_non_ascii_text() {
        assert_eq!(pieces("ordre·<n>·é"), "ordre·|<n>|·é");
        assert_eq!(pieces("<größe>"), "<größe>");
    }

    #[test]
    fn rejects_broken_templates() {
        assert!(error("").contains("the lock key is empty"));
        assert!(error("a<>b").contains("empty placeholder `<>`"));
        assert!(error("order:<id").contains("unclosed `<`"));
        assert!(error("order:<a<b>").contains("unclosed `<`"));
        assert!(error("a>b").contains("`>` without a matching `<`"));
        assert!(error("<a.>").contains("not a valid field path"));
        assert!(error("<a..b>").contains("not a valid field path"));
        assert!(error("<.a>").contains("does not start with a parameter name"));
        assert!(error("<1>").contains("does not start with a parameter name"));
        assert!(error("<_>").contains("does not start with a parameter name"));
        assert!(error("<a-b>").contains("does not start with a parameter name"));
        assert!(error("<a.01>").contains("not a valid field path"));
        assert!(error("<a.self>").contains("not a valid field path"));
        assert!(error("<a.id()>").contains("cannot call methods"));
        assert!(error("<order id>").contains("no spaces"));
    }

    #[test]
    fn reports_every_problem() {
        let all = error("<>:<a:b>c>:<");
        assert_eq!(all.lines().count(), 4, "{all}");
    }
}
