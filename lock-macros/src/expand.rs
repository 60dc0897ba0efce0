//! Code generation. Everything here has been validated; nothing can fail.
//!
//! ```text
//! async fn f(args) -> Result<T, E> {
//!     let __lock_keys = /* a Vec of keys, each template written with one `write_fmt` */;
//!     let __lock_acquired = /* acquire_with on the client: kind, keys, __private::Options */;
//!     let __lock_outcome = match __lock_acquired {   // Result<Result<T, E>, LockError>
//!         Ok(guard) => __private::run(guard, async move { Ok(async move { body }.await) }).await,
//!         // on_busy = "skip" only: a busy lock is `Ok(None)`.
//!         Err(e) if e.is_timeout() => return Ok(None),
//!         Err(e) => Err(e),
//!     };
//!     match __lock_outcome { Ok(result) => result, Err(e) => Err(From::from(e)) }
//! }
//! ```

use proc_macro2::{Literal, Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned as _;
use syn::visit_mut::VisitMut;
use syn::{GenericArgument, Ident, PathArguments, Type};

use crate::attr::{Kind, OnBusy, Options};
use crate::key::{Piece, Template};
use crate::valid::LockedFn;

/// The function with the lock around its body.
pub(crate) fn function(function: &LockedFn, options: &Options, ret: &Type) -> TokenStream {
    let LockedFn {
        attrs,
        vis,
        sig,
        inner_attrs,
        body,
    } = function;
    let private = match &options.krate {
        Some(krate) => quote!(#krate::__private),
        None => quote!(::lock_runtime::__private),
    };
    let keys = local("__lock_keys");
    let client = local("__lock_client");
    let acquired = local("__lock_acquired");
    let guard = local("__lock_guard");
    let error = local("__lock_error");

    let kind = kind(options.kind, &private);
    let lock_options = lock_options(options, &private);
    let acquire = match &options.client {
        // A clone of the client, so that temporaries of the expression (a
        // mutex guard, a borrow of `self`) end here, before any `.await`.
        // The clone is `LockClient`'s own, named, so that the borrow of the
        // expression coerces: a reference (`&mut` too), an `Arc`, a guard or
        // anything else that derefs to a `LockClient` works.
        Some(expr) => {
            let span = expr.span();
            let clone = quote_spanned!(span=>
                <#private::LockClient as ::core::clone::Clone>::clone(&(#expr)));
            // The coercion to `&LockClient`, where a wrong type is reported
            // on the expression.
            let at_expr = Ident::new("__lock_client", Span::mixed_site().located_at(span));
            let borrow = quote_spanned!(span=> &#at_expr);
            let client_ref = local("__lock_client_ref");
            quote! {{
                #[allow(clippy::clone_on_copy, clippy::redundant_clone)]
                let #client = #clone;
                let #client_ref: &#private::LockClient = #borrow;
                #private::acquire_with(#client_ref, #kind, #keys, #lock_options).await
            }}
        }
        None => quote! {{
            let #client = #private::default_client();
            match #client {
                ::core::result::Result::Ok(#client) => {
                    #private::acquire_with(&#client, #kind, #keys, #lock_options).await
                }
                ::core::result::Result::Err(#error) => ::core::result::Result::Err(#error),
            }
        }},
    };
    // The keys are built in a statement of their own: the temporaries of
    // `format_args!` must not live across the `.await` (they are not `Send`).
    let (keys_stmt, acquire) = match keys_value(&options.keys, &keys, &private) {
        KeysValue::Fixed(value) => (
            quote!(let #keys: ::std::vec::Vec<::std::string::String> = #value;),
            acquire,
        ),
        KeysValue::Formatted(value) => (
            quote!(let #keys = #value;),
            quote! {
                match #keys {
                    ::core::result::Result::Ok(#keys) => #acquire,
                    ::core::result::Result::Err(#error) => ::core::result::Result::Err(#error),
                }
            },
        ),
    };

    // The body runs in the lock's scope with `LockError` as `run`'s error
    // type, and its own result nested inside; so the conversion of a
    // `LockError` into the function's error type happens in one place, and
    // a missing `From<LockError>` is one error, reported on `E`.
    let error_span = error_type(ret).span();
    let unconverted = Ident::new("__lock_error", error_span);
    let converted = local("__lock_converted");
    // Spanned on the user's `E`, so lints see user code: allow the ones
    // that fire when `E` is `LockError` itself.
    let convert = quote_spanned! {error_span=>
        #[allow(clippy::useless_conversion)]
        let #converted = ::core::convert::From::from(#unconverted);
    };
    let fake_return = fake_return(ret);
    let skip = match options.on_busy {
        OnBusy::Error => None,
        OnBusy::Skip(span) => Some(skip_arm(&error, &private, span)),
    };
    let outcome = local("__lock_outcome");
    let result = local("__lock_result");
    quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #keys_stmt
            let #acquired = #acquire;
            let #outcome = match #acquired {
                ::core::result::Result::Ok(#guard) => {
                    #private::run(#guard, async move {
                        ::core::result::Result::Ok::<_, #private::LockError>(
                            async move {
                                #fake_return
                                { #body }
                            }
                            .await,
                        )
                    })
                    .await
                }
                #skip
                ::core::result::Result::Err(#error) => ::core::result::Result::Err(#error),
            };
            match #outcome {
                ::core::result::Result::Ok(#result) => #result,
                ::core::result::Result::Err(#unconverted) => {
                    #convert
                    ::core::result::Result::Err(#converted)
                }
            }
        }
    }
}

/// A name the user's code cannot see or shadow.
fn local(name: &str) -> Ident {
    Ident::new(name, Span::mixed_site())
}

/// `Some(Duration::from_millis(ms))`, computed at compile time.
fn duration(ms: Option<u64>) -> TokenStream {
    match ms {
        Some(ms) => {
            let ms = Literal::u64_suffixed(ms);
            quote!(::core::option::Option::Some(::core::time::Duration::from_millis(#ms)))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// The runtime's `Options` of the lock: every field written out, each a
/// constant.
fn lock_options(options: &Options, private: &TokenStream) -> TokenStream {
    // `lock_at_most` is the lease, never renewed; the two are never given
    // together.
    let lease = duration(options.lease.or(options.lock_at_most));
    let fixed_lease = options.lock_at_most.is_some();
    let wait = duration(options.wait);
    let replicas = replicas(options.min_replicas);
    let at_least = duration(options.lock_at_least);
    let max_hold = duration(options.max_hold);
    let write = options.write;
    quote! {
        #private::Options {
            lease: #lease,
            wait: #wait,
            min_replicas: #replicas,
            at_least: #at_least,
            fixed_lease: #fixed_lease,
            max_hold: #max_hold,
            write: #write,
        }
    }
}

/// For `on_busy = "skip"`: the arm that returns `Ok(None)` from the
/// function when the lock stayed busy for the whole wait.
///
/// `None` is made by the runtime's `__private::OnBusySkip`, implemented
/// for `Option<T>` only, its call spanned on the option's value: when the
/// function's `T` is not an `Option`, the error is reported on
/// `on_busy = "skip"` with the trait's message (it needs `Result<Option<T>,
/// E>`), instead of a type mismatch inside the macro. The message is the
/// trait's `#[diagnostic::on_unimplemented]`, in the runtime crate, so the
/// expansion carries no tool attribute (whose path would not resolve in a
/// `#![no_implicit_prelude]` module, or next to a module named
/// `diagnostic`).
fn skip_arm(error: &Ident, private: &TokenStream, span: Span) -> TokenStream {
    // Spanned on `"skip"`: a function that does not return
    // `Result<Option<T>, E>` gets the trait's message there.
    let skipped = quote_spanned! {span=>
        <_ as #private::OnBusySkip>::skipped()
    };
    quote! {
        ::core::result::Result::Err(#error) if #private::LockError::is_timeout(&#error) => {
            return ::core::result::Result::Ok(#skipped);
        }
    }
}

/// `Some(n)` for `min_replicas = n` (0 included: it overrides the client's
/// setting), `None` to leave the client's.
fn replicas(replicas: Option<u32>) -> TokenStream {
    match replicas {
        Some(replicas) => {
            let replicas = Literal::u32_suffixed(replicas);
            quote!(::core::option::Option::Some(#replicas))
        }
        None => quote!(::core::option::Option::None),
    }
}

/// The runtime's name for `kind`.
fn kind(kind: Kind, private: &TokenStream) -> TokenStream {
    match kind {
        Kind::Exclusive => quote!(#private::Kind::Exclusive),
        Kind::Permits(permits) => {
            let permits = Literal::u32_suffixed(permits);
            // One of `permits` permits.
            quote!(#private::Kind::Permits(::core::convert::From::from(#permits)))
        }
        Kind::Read => quote!(#private::Kind::Read),
        Kind::Fair => quote!(#private::Kind::Fair),
    }
}

enum KeysValue {
    /// A `Vec<String>`: no template has placeholders.
    Fixed(TokenStream),
    /// A `Result<Vec<String>, LockError>`: a `Display` implementation can fail.
    Formatted(TokenStream),
}

/// The keys, in the order of the templates. A template without
/// placeholders is a string constant; any other is one `write_fmt` whose
/// format string holds the template's text and a `{}` per placeholder,
/// each argument spanned on its placeholder so that a missing `Display` is
/// reported there.
fn keys_value(templates: &[Template], keys: &Ident, private: &TokenStream) -> KeysValue {
    let key = local("__lock_key");
    let failed = local("__lock_failed");
    let mut fixed = Vec::new();
    let mut pushes = Vec::new();
    for template in templates {
        let mut format = String::new();
        let mut text = String::new();
        let mut args = Vec::new();
        for piece in &template.pieces {
            match piece {
                Piece::Text(piece) => {
                    format.push_str(&piece.replace('{', "{{").replace('}', "}}"));
                    text.push_str(piece);
                }
                Piece::Value(placeholder) => {
                    format.push_str("{}");
                    let root = &placeholder.root;
                    let fields = &placeholder.fields;
                    args.push(quote_spanned!(placeholder.span=> #root #(.#fields)*));
                }
            }
        }
        if args.is_empty() {
            // Trait methods by their trait, which need not be in scope.
            let value = quote!(<::std::string::String as ::core::convert::From<&str>>::from(#text));
            pushes.push(quote!(#keys.push(#value);));
            fixed.push(value);
        } else {
            pushes.push(quote! {{
                let mut #key = ::std::string::String::new();
                #failed |= ::core::fmt::Write::write_fmt(
                    &mut #key,
                    ::core::format_args!(#format, #(#args),*),
                )
                .is_err();
                #keys.push(#key);
            }});
        }
    }
    if fixed.len() == templates.len() {
        return KeysValue::Fixed(quote!(::std::vec![#(#fixed),*]));
    }
    let count = templates.len();
    KeysValue::Formatted(quote! {{
        let mut #keys = ::std::vec::Vec::with_capacity(#count);
        let mut #failed = false;
        #(#pushes)*
        if #failed {
            ::core::result::Result::Err(#private::LockError::Config(
                <::std::string::String as ::core::convert::From<&str>>::from(
                    "a `Display` implementation failed while writing the lock key",
                ),
            ))
        } else {
            ::core::result::Result::Ok(#keys)
        }
    }})
}

/// `E` of `Result<T, E>`, or the whole type for an alias like `io::Result<T>`.
fn error_type(ret: &Type) -> &Type {
    if let Type::Path(path) = ret
        && let Some(last) = path.path.segments.last()
        && let PathArguments::AngleBracketed(args) = &last.arguments
        && let [GenericArgument::Type(_), GenericArgument::Type(error)] =
            args.args.iter().collect::<Vec<_>>().as_slice()
    {
        return error;
    }
    ret
}

/// An unreachable `return` of the declared type as the body's first
/// statement, so the body's type is known before its own returns and `?`s
/// are checked, and a type error points at the user's code, not at the
/// macro. The technique is tracing-attributes'.
fn fake_return(ret: &Type) -> TokenStream {
    let mut ret = ret.clone();
    // `impl Trait` is not allowed in a `let`'s type; let inference fill it in.
    ImplTraitEraser.visit_type_mut(&mut ret);
    let value = local("__lock_fake_return");
    quote_spanned! {ret.span()=>
        #[allow(
            unreachable_code,
            clippy::diverging_sub_expression,
            clippy::empty_loop,
            clippy::let_unit_value,
            clippy::needless_return,
            clippy::unreachable
        )]
        if false {
            let #value: #ret = loop {};
            return #value;
        }
    }
}

struct ImplTraitEraser;

impl VisitMut for ImplTraitEraser {
    fn visit_type_mut(&mut self, ty: &mut Type) {
        if let Type::ImplTrait(impl_trait) = ty {
            *ty = Type::Infer(syn::TypeInfer {
                attrs: Vec::new(),
                underscore_token: syn::Token![_](impl_trait.impl_token.span),
            });
        } else {
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    fn expand(args: TokenStream, item: TokenStream) -> String {
        let options = Options::parse(args).unwrap();
        let function: LockedFn = syn::parse2(item).unwrap();
        let ret = crate::valid::check(&function, &options.keys).unwrap();
        super::function(&function, &options, ret).to_string()
    }

    #[test]
    fn durations_are_constants() {
        let code = expand(
            quote!(key = "k", lease = "1m30s", wait = "0s"),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(code.contains("from_millis (90000u64)"), "{code}");
        assert!(code.contains("from_millis (0u64)"), "{code}");
        let code = expand(
            quote!(key = "k"),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!code.contains("from_millis"), "{code}");
    }

    #[test]
    fn templates_become_one_format_string() {
        let code = expand(
            quote!(key = "{tenant:<t>}:order:<o.id>"),
            quote!(
                async fn f(t: u8, o: &O) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            code.contains(r#"format_args ! ("{{tenant:{}}}:order:{}" , t , o . id)"#),
            "{code}"
        );
        let code = expand(
            quote!(key = "fixed{x}"),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!code.contains("format_args"), "{code}");
        assert!(code.contains(r#"from ("fixed{x}")"#), "{code}");
    }

    #[test]
    fn keys_become_one_vec_in_template_order() {
        let code = expand(
            quote!(keys = ["account:<from>", "audit", "account:<to>"]),
            quote!(
                async fn f(from: u64, to: u64) -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        let from = code.find(r#"format_args ! ("account:{}" , from)"#);
        let audit = code.find(r#"from ("audit")"#);
        let to = code.find(r#"format_args ! ("account:{}" , to)"#);
        assert!(from < audit && audit < to && from.is_some(), "{code}");
        assert!(code.contains("with_capacity (3usize)"), "{code}");
        assert!(code.contains("__private :: Kind :: Exclusive"), "{code}");

        let code = expand(
            quote!(keys = ["a", "b"]),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(!code.contains("format_args"), "{code}");
        assert!(code.contains(":: std :: vec ! [<"), "{code}");
        assert!(
            code.contains(r#":: from ("a") , <"#) && code.contains(r#":: from ("b")]"#),
            "{code}"
        );
    }

    #[test]
    fn permits_become_the_semaphore_kind() {
        let code = expand(
            quote!(key = "exports", permits = 3),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            code.contains(
                "__private :: Kind :: Permits (:: core :: convert :: From :: from (3u32))"
            ),
            "{code}"
        );
        assert!(code.contains("__private :: acquire_with"), "{code}");
    }

    #[test]
    fn modes_and_fairness_become_kinds() {
        for (args, kind) in [
            (quote!(key = "k", mode = "read"), "Kind :: Read"),
            (quote!(key = "k", mode = "write"), "Kind :: Exclusive"),
            (quote!(key = "k", fair = true), "Kind :: Fair"),
            (quote!(key = "k", fair = false), "Kind :: Exclusive"),
        ] {
            let code = expand(
                args.clone(),
                quote!(
                    async fn f() -> Result<(), E> {
                        Ok(())
                    }
                ),
            );
            assert!(
                code.contains(&format!("__private :: {kind} ,")),
                "{args}: {code}"
            );
        }
    }

    #[test]
    fn min_replicas_is_passed_as_a_constant() {
        let function = quote!(
            async fn f() -> Result<(), E> {
                Ok(())
            }
        );
        for (args, passed) in [
            (quote!(key = "k", min_replicas = 2), "Option :: Some (2u32)"),
            // 0 is passed too: it turns the client's setting off.
            (quote!(key = "k", min_replicas = 0), "Option :: Some (0u32)"),
            (quote!(key = "k"), "Option :: None"),
        ] {
            let code = expand(args.clone(), function.clone());
            let options = lock_options(&code);
            let field = options
                .split(" , ")
                .find(|field| field.starts_with("min_replicas :"))
                .unwrap_or_else(|| panic!("{code}"));
            assert!(field.ends_with(passed), "{args}: {options}");
        }
    }

    /// The `__private :: Options { .. }` passed to `acquire_with`.
    fn lock_options(code: &str) -> &str {
        let start = code
            .find("__private :: Options {")
            .unwrap_or_else(|| panic!("no options: {code}"));
        let options = &code[start..];
        let end = options.find(", }").unwrap_or_else(|| panic!("{code}"));
        &options[..end + 3]
    }

    fn plain() -> TokenStream {
        quote!(
            async fn f() -> Result<(), E> {
                Ok(())
            }
        )
    }

    #[test]
    fn acquire_with_gets_every_option() {
        let code = expand(quote!(key = "k"), plain());
        assert!(!code.contains("acquire_kind"), "{code}");
        assert_eq!(
            lock_options(&code),
            "__private :: Options { \
             lease : :: core :: option :: Option :: None , \
             wait : :: core :: option :: Option :: None , \
             min_replicas : :: core :: option :: Option :: None , \
             at_least : :: core :: option :: Option :: None , \
             fixed_lease : false , \
             max_hold : :: core :: option :: Option :: None , \
             write : false , }"
        );
        let code = expand(
            quote!(key = "k", lease = "1m", wait = "2s", min_replicas = 1),
            plain(),
        );
        let options = lock_options(&code);
        assert!(
            options.contains("lease : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (60000u64))"),
            "{options}"
        );
        assert!(options.contains("from_millis (2000u64)"), "{options}");
        assert!(options.contains("fixed_lease : false"), "{options}");
        let code = expand(quote!(key = "k", mode = "write"), plain());
        assert!(lock_options(&code).contains("write : true"), "{code}");
    }

    #[test]
    fn lock_at_most_is_a_fixed_lease_and_lock_at_least_a_minimum() {
        let code = expand(
            quote!(key = "k", lock_at_most = "10m", lock_at_least = "30s"),
            plain(),
        );
        let options = lock_options(&code);
        assert!(
            options.contains("lease : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (600000u64))"),
            "{options}"
        );
        assert!(
            options.contains("at_least : :: core :: option :: Option :: Some (:: core :: time :: Duration :: from_millis (30000u64))"),
            "{options}"
        );
        assert!(options.contains("fixed_lease : true"), "{options}");
        // `lock_at_least` alone leaves the lease renewed.
        let code = expand(quote!(key = "k", lock_at_least = "1s"), plain());
        let options = lock_options(&code);
        assert!(
            options.contains("lease : :: core :: option :: Option :: None"),
            "{options}"
        );
        assert!(options.contains("from_millis (1000u64)"), "{options}");
        assert!(options.contains("fixed_lease : false"), "{options}");
    }

    #[test]
    fn on_busy_skip_returns_none_on_a_timeout_only() {
        let skipping = quote!(
            async fn f() -> Result<Option<u8>, E> {
                Ok(Some(1))
            }
        );
        let code = expand(quote!(key = "k", on_busy = "skip"), skipping.clone());
        let arm = "if :: lock_runtime :: __private :: LockError :: is_timeout (& __lock_error)";
        let at = code.find(arm).unwrap_or_else(|| panic!("{code}"));
        let after = &code[at..];
        assert!(
            after.contains("return :: core :: result :: Result :: Ok (< _ as :: lock_runtime :: __private :: OnBusySkip > :: skipped ())"),
            "{code}"
        );
        // Any other error is still converted and returned.
        let other = after
            .find(":: core :: result :: Result :: Err (__lock_error) => :: core :: result :: Result :: Err (__lock_error)")
            .unwrap_or_else(|| panic!("{code}"));
        assert!(other > 0);
        // No tool attribute: its path would not resolve everywhere.
        assert!(!code.contains("diagnostic"), "{code}");

        for args in [quote!(key = "k"), quote!(key = "k", on_busy = "error")] {
            let code = expand(args.clone(), plain());
            assert!(!code.contains("is_timeout"), "{args}: {code}");
            assert!(!code.contains("OnBusySkip"), "{args}: {code}");
        }
    }

    #[test]
    fn runtime_path_can_be_overridden() {
        let code = expand(
            quote!(key = "k", crate = "::my::locks"),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        );
        assert!(
            code.contains(":: my :: locks :: __private :: acquire"),
            "{code}"
        );
        assert!(!code.contains("lock_runtime"), "{code}");
    }
}
