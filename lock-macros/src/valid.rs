//! The function the attribute is on, and the checks that need its signature:
//! `async`, a `Result` return type, placeholders that name parameters.

use proc_macro2::TokenStream;
use syn::ext::IdentExt as _;
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned as _;
use syn::{
    Attribute, FnArg, Ident, Pat, PathArguments, ReturnType, Signature, Token, Type, Visibility,
    braced,
};

use crate::attr::{Errors, did_you_mean};
use crate::key::Template;

/// An `fn` item, trait method or impl method, with its body kept as tokens:
/// the body is moved into the expansion, never inspected.
pub(crate) struct LockedFn {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// `#![...]` at the start of the body; they stay on the function.
    pub(crate) inner_attrs: Vec<Attribute>,
    pub(crate) body: TokenStream,
}

impl Parse for LockedFn {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let starts_fn = input.peek(Token![fn])
            || input.peek(Token![async])
            || input.peek(Token![const])
            || input.peek(Token![unsafe])
            || input.peek(Token![extern]);
        if !starts_fn {
            return Err(input.error("`#[distributed_lock]` applies to `async fn` only"));
        }
        let sig: Signature = input.parse()?;
        if input.peek(Token![;]) {
            return Err(syn::Error::new(
                input.span(),
                "`#[distributed_lock]` needs the function's body: put it on the method in the `impl` block, \
                 or give the trait method a default body",
            ));
        }
        let content;
        braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body: TokenStream = content.parse()?;
        Ok(LockedFn {
            attrs,
            vis,
            sig,
            inner_attrs,
            body,
        })
    }
}

/// Checks the signature, and the placeholders of the key templates against
/// it (none when the options did not parse). Returns the declared return
/// type.
pub(crate) fn check<'a>(function: &'a LockedFn, keys: &[Template]) -> syn::Result<&'a Type> {
    let sig = &function.sig;
    let mut errors = Errors::default();
    if sig.asyncness.is_none() {
        errors.push(syn::Error::new(
            sig.fn_token.span,
            "`#[distributed_lock]` applies to `async fn` only: the lock is taken and renewed with `.await`; \
             make this function `async`",
        ));
    }
    let ret = errors.take(result_type(sig));
    for key in keys {
        check_placeholders(sig, key, &mut errors);
    }
    errors.finish()?;
    // No error means the return type was found.
    ret.ok_or_else(|| syn::Error::new(sig.ident.span(), "no return type"))
}

/// The return type, which must be a `Result`.
fn result_type(sig: &Signature) -> syn::Result<&Type> {
    const EXPECTED: &str = "`#[distributed_lock]` functions return `Result<T, E>` with `E: From<LockError>`, \
                            because a lock that times out or is lost is returned as an error";
    let ty = match &sig.output {
        ReturnType::Type(_, ty) => ty,
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.ident.span(),
                format!("{EXPECTED}; `{}` returns `()`", sig.ident),
            ));
        }
    };
    let mut inner: &Type = ty;
    loop {
        match inner {
            Type::Group(group) => inner = &group.elem,
            Type::Paren(paren) => inner = &paren.elem,
            _ => break,
        }
    }
    // `Result<T, E>`, `std::result::Result<T, E>`, or an alias such as
    // `anyhow::Result<T>` or `AppResult<T>`: what `E` is, the compiler checks.
    let is_result = match inner {
        Type::Path(path) => path.qself.is_none()
            && path.path.segments.last().is_some_and(|last| {
                last.ident.to_string().ends_with("Result") && matches!(&last.arguments, PathArguments::AngleBracketed(args) if !args.args.is_empty())
            }),
        _ => false,
    };
    if is_result {
        Ok(ty)
    } else {
        Err(syn::Error::new(
            ty.span(),
            format!("{EXPECTED}; this is not a `Result`"),
        ))
    }
}

fn check_placeholders(sig: &Signature, key: &Template, errors: &mut Errors) {
    let params = parameters(sig);
    for placeholder in key.placeholders() {
        let root = placeholder.root.unraw().to_string();
        if params.contains(&root) {
            continue;
        }
        let message = if root == "self" {
            format!(
                "`<{}>`: `{}` takes no `self`; {}",
                placeholder.text,
                sig.ident,
                listing(sig, &params)
            )
        } else {
            let hint = did_you_mean(&root, params.iter().map(String::as_str))
                .map(|name| format!("did you mean `{name}`? "))
                .unwrap_or_default();
            format!(
                "`<{}>`: `{root}` is not a parameter of `{}`; {hint}{}",
                placeholder.text,
                sig.ident,
                listing(sig, &params)
            )
        };
        errors.push(syn::Error::new(placeholder.span, message));
    }
}

/// "the parameters are `a`, `b`", or what to do without any.
fn listing(sig: &Signature, params: &[String]) -> String {
    match params {
        [] => format!("`{}` has no named parameters to put in the key", sig.ident),
        [one] => format!("the only parameter is `{one}`"),
        _ => {
            let names: Vec<String> = params.iter().map(|name| format!("`{name}`")).collect();
            format!("the parameters are {}", names.join(", "))
        }
    }
}

/// The names a placeholder can start with: `self` and every binding in
/// the parameters' patterns (`order`, or `state` in `State(state): State<S>`).
fn parameters(sig: &Signature) -> Vec<String> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => names.push("self".to_owned()),
            FnArg::Typed(typed) => bindings(&typed.pat, &mut names),
        }
    }
    names
}

fn bindings(pat: &Pat, names: &mut Vec<String>) {
    let mut add = |ident: &Ident| names.push(ident.unraw().to_string());
    match pat {
        Pat::Ident(pat) => {
            add(&pat.ident);
            if let Some((_, sub)) = &pat.subpat {
                bindings(sub, names);
            }
        }
        Pat::Reference(pat) => bindings(&pat.pat, names),
        Pat::Paren(pat) => bindings(&pat.pat, names),
        Pat::Type(pat) => bindings(&pat.pat, names),
        Pat::Tuple(pat) => pat.elems.iter().for_each(|pat| bindings(pat, names)),
        Pat::TupleStruct(pat) => pat.elems.iter().for_each(|pat| bindings(pat, names)),
        Pat::Slice(pat) => pat.elems.iter().for_each(|pat| bindings(pat, names)),
        Pat::Struct(pat) => pat
            .fields
            .iter()
            .for_each(|field| bindings(&field.pat, names)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn function(tokens: TokenStream) -> LockedFn {
        syn::parse2(tokens).unwrap_or_else(|e| panic!("{e}"))
    }

    fn key(text: &str) -> Template {
        crate::key::parse(&syn::LitStr::new(text, proc_macro2::Span::call_site())).unwrap()
    }

    fn error(tokens: TokenStream, template: &str) -> String {
        let function = function(tokens);
        match check(&function, &[key(template)]) {
            Ok(_) => panic!("should be rejected"),
            Err(err) => crate::messages(err),
        }
    }

    #[test]
    fn accepts_result_types_and_aliases() {
        for ret in [
            quote!(Result<(), E>),
            quote!(::std::result::Result<u8, E>),
            quote!(io::Result<u8>),
            quote!(anyhow::Result<()>),
            quote!(AppResult<()>),
            quote!((Result<(), E>)),
        ] {
            let f = function(quote!(async fn f(id: u64) -> #ret {}));
            assert!(check(&f, &[key("<id>")]).is_ok(), "{ret}");
        }
    }

    #[test]
    fn rejects_other_return_types() {
        assert!(
            error(
                quote!(
                    async fn f() -> u32 {}
                ),
                "k"
            )
            .contains("this is not a `Result`")
        );
        assert!(
            error(
                quote!(
                    async fn f() -> Result {}
                ),
                "k"
            )
            .contains("this is not a `Result`")
        );
        assert!(
            error(
                quote!(
                    async fn f() -> Option<u32> {}
                ),
                "k"
            )
            .contains("this is not a `Result`")
        );
        assert!(
            error(
                quote!(
                    async fn f() {}
                ),
                "k"
            )
            .contains("`f` returns `()`")
        );
    }

    #[test]
    fn requires_async() {
        assert!(
            error(
                quote!(
                    fn f() -> Result<(), E> {}
                ),
                "k"
            )
            .contains("applies to `async fn` only")
        );
    }

    #[test]
    fn placeholders_must_name_parameters() {
        let f = quote!(
            async fn settle(order_id: u64, db: &Db) -> Result<(), E> {}
        );
        let message = error(f.clone(), "order:<order>");
        assert!(
            message.contains("`order` is not a parameter of `settle`"),
            "{message}"
        );
        assert!(
            message.contains("the parameters are `order_id`, `db`"),
            "{message}"
        );
        assert!(error(f.clone(), "<order_ix>").contains("did you mean `order_id`?"));
        assert!(error(f, "<self.id>").contains("`settle` takes no `self`"));
        assert!(
            error(
                quote!(
                    async fn f() -> Result<(), E> {}
                ),
                "<x>"
            )
            .contains("no named parameters")
        );
    }

    #[test]
    fn finds_bindings_in_patterns() {
        let f = function(quote!(
            async fn f(
                &self,
                State(state): State<S>,
                (a, b): (u8, u8),
                Wrapper { inner: c, .. }: W,
                r#type: u8,
            ) -> Result<(), E> {
            }
        ));
        assert_eq!(parameters(&f.sig), ["self", "state", "a", "b", "c", "type"]);
        assert!(check(&f, &[key("<self.x><state.y><a><b><c.0><type><r#type>")]).is_ok());
    }

    #[test]
    fn reports_every_problem_at_once() {
        let all = error(
            quote!(
                fn f(a: u8) -> u8 {}
            ),
            "<b>:<c>",
        );
        assert_eq!(all.lines().count(), 4, "{all}");
    }

    #[test]
    fn keeps_inner_attributes_apart() {
        let f = function(quote!(
            async fn f() -> Result<(), E> {
                #![allow(unused)]
                let x = 1;
                Ok(())
            }
        ));
        assert_eq!(f.inner_attrs.len(), 1);
        assert_eq!(f.body.to_string(), quote!(let x = 1; Ok(())).to_string());
    }

    #[test]
    fn rejects_items_that_are_not_functions() {
        let err = syn::parse2::<LockedFn>(quote!(
            struct S;
        ))
        .err()
        .unwrap();
        assert!(err.to_string().contains("applies to `async fn` only"));
        let err = syn::parse2::<LockedFn>(quote!(
            async fn f(&self) -> Result<(), E>;
        ))
        .err()
        .unwrap();
        assert!(err.to_string().contains("needs the function's body"));
    }
}
