//! Compile-time behaviour of `#[distributed_lock]`: every supported shape
//! compiles (`ui/pass`), and every mistake is a readable error at the right
//! place (`ui/fail`, one kind of error per file, with its expected output in
//! the `.stderr` next to it; regenerate with `TRYBUILD=overwrite`).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
