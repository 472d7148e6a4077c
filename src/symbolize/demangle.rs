//! Symbol names as their authors wrote them: Rust names (v0 `_R…`, legacy
//! `_ZN…17h<hash>E`) and C++ names (Itanium `_Z…`) demangled, every other name kept
//! as it is.
//!
//! Only names that carry a mangling prefix are demangled. A bare name is a C name:
//! the Itanium grammar also reads bare *type* encodings, so trying it on every name
//! (as blazesym's own demangling does) turns C functions called `a`, `b` or `c` into
//! `signed char`, `bool` and `char`.

use std::borrow::Cow;

/// `raw` demangled when it is a Rust or C++ mangled name, else `raw` unchanged.
///
/// # Examples
/// ```
/// use perfring::symbolize::demangle;
/// assert_eq!(demangle("_ZN3std2io5stdio6_print17h0123456789abcdefE"), "std::io::stdio::_print");
/// assert_eq!(demangle("_Z3addii"), "add(int, int)");
/// assert_eq!(demangle("b"), "b"); // a C function, not the type `bool`
/// ```
pub fn demangle(raw: &str) -> Cow<'_, str> {
    if raw.starts_with("_R") || raw.starts_with("_ZN") {
        if let Ok(name) = rustc_demangle::try_demangle(raw) {
            // `{:#}` leaves out legacy names' hash, as perf and blazesym print them.
            return Cow::Owned(format!("{name:#}"));
        }
    }
    if raw.starts_with("_Z") {
        if let Some(name) = cpp_demangle::Symbol::new(raw)
            .ok()
            .and_then(|s| s.demangle().ok())
        {
            return Cow::Owned(name);
        }
    }
    Cow::Borrowed(raw)
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn c_names_stay_as_they_are() {
        for name in ["a", "b", "c", "d", "i", "main", "v", "Sa", "St"] {
            assert_eq!(demangle(name), name);
        }
    }

    #[test]
    fn rust_and_cpp_names_are_demangled() {
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(
            demangle("_ZN7mycrate3foo17h0011223344556677E"),
            "mycrate::foo"
        );
        assert_eq!(demangle("_ZN2ns5Klass6methodEv"), "ns::Klass::method()");
        assert_eq!(demangle("_Z1ai"), "a(int)");
        // Not a valid mangling: kept.
        assert_eq!(demangle("_Z"), "_Z");
    }
}
