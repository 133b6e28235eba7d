//! A dispute's `reason_safe`: the upstream reason with markup and control
//! characters stripped, at most 200 characters (contract section 10).
//!
//! The upstream reason comes from a system we do not control and ends up in
//! API answers, webhook payloads and, sooner or later, someone's dashboard.
//! So the result is plain text that no renderer can mistake for markup: no
//! `<` or `>` survives at all (entities such as `&lt;` are left as they are:
//! decoding them is what would turn them back into markup), nothing
//! invisible survives, and whitespace is one plain space between words.
//!
//! The function is idempotent, so re-projecting an already sanitised reason
//! (or sanitising twice on two paths) can never change it.

/// Longest `reason_safe`, in characters (Unicode scalar values).
pub const MAX_REASON_CHARS: usize = 200;

/// The sanitised form of an upstream dispute reason (see the module's
/// documentation). In order: markup is removed (comments `<!-- … -->`, then
/// anything from a `<` to the next `>`, then any `<` or `>` left over);
/// control characters and invisible formatting characters are dropped;
/// each run of whitespace becomes one space; the ends are trimmed; the text
/// is cut to 200 characters.
pub fn reason_safe(raw: &str) -> String {
    let text = strip_markup(raw);
    let mut out = String::with_capacity(text.len().min(4 * MAX_REASON_CHARS));
    let mut chars = 0;
    // A space is only written once a visible character follows it, which
    // collapses runs and trims both ends in one pass.
    let mut space = false;
    for c in text.chars() {
        if c.is_whitespace() {
            space = true;
        } else if c.is_control() || is_invisible(c) {
            // Dropped without a trace: `a\u{0}b` was never two words.
        } else {
            let needed = if space && chars > 0 { 2 } else { 1 };
            if chars + needed > MAX_REASON_CHARS {
                break;
            }
            if needed == 2 {
                out.push(' ');
            }
            out.push(c);
            chars += needed;
            space = false;
        }
    }
    out
}

/// Removes markup. A `<` that no `>` follows is a stray character, not the
/// start of a tag, so only the `<` itself goes (the text after it stays);
/// an unclosed comment runs to the end, as it would in a browser.
fn strip_markup(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(i) = rest.find(['<', '>']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        rest = if let Some(after) = tail.strip_prefix('>') {
            after
        } else if let Some(comment) = tail.strip_prefix("<!--") {
            match comment.find("-->") {
                Some(end) => &comment[end + 3..],
                None => "",
            }
        } else {
            let after = &tail[1..];
            match after.find('>') {
                Some(end) => &after[end + 1..],
                None => after,
            }
        };
    }
    out.push_str(rest);
    out
}

/// Format characters that render as nothing but can reorder or hide text
/// (bidirectional overrides and isolates, zero-width space and word joiner,
/// the byte order mark). Zero-width (non-)joiners stay: some scripts and
/// emoji need them, and they cannot reorder anything.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{200B}'
            | '\u{200E}'
            | '\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        let cases = [
            ("fraudulent", "fraudulent"),
            ("<script>alert(1)</script>Fraud", "alert(1)Fraud"),
            ("<b>Product</b> not received", "Product not received"),
            ("<<b>>Fraud", "Fraud"),
            (
                "<a href=\"x\"><img src=x onerror=alert(1)>Fraud</a>",
                "Fraud",
            ),
            ("Fraud <b", "Fraud b"),
            ("a < b", "a b"),
            ("<p>nested <i>tags</i> here", "nested tags here"),
            ("x <!-- a > b --> y", "x y"),
            ("x <!-- never closed > y", "x"),
            ("1 > 0 & 2 &lt;3", "1 0 & 2 &lt;3"),
            ("  line\none\r\n\ttwo  ", "line one two"),
            ("a\u{0}b\u{7}c\u{1b}[31md", "abc[31md"),
            ("pay\u{202E}lapyap\u{202C} me\u{200B}", "paylapyap me"),
            ("Café\u{00A0}crème 💳", "Café crème 💳"),
            ("", ""),
            ("<>", ""),
            (" \u{0} <x> \t ", ""),
        ];
        for (raw, safe) in cases {
            assert_eq!(reason_safe(raw), safe, "{raw:?}");
        }
    }

    #[test]
    fn cut_at_200_chars_on_a_char_boundary() {
        let long = "é".repeat(300);
        let safe = reason_safe(&long);
        assert_eq!(safe.chars().count(), 200);
        assert_eq!(safe, "é".repeat(200));
        // A space at the cut is not left dangling.
        let words = format!("{} {}", "a".repeat(199), "b".repeat(10));
        assert_eq!(reason_safe(&words), "a".repeat(199));
        let exact = "x".repeat(200);
        assert_eq!(reason_safe(&exact), exact);
    }

    fn markup_heavy() -> impl Strategy<Value = String> {
        "([<>!\\- /a-zé\t\n\r\u{0}\u{1f}\u{7f}\u{85}\u{a0}\u{202e}\u{feff}]|<!--|-->|<b>|</b>){0,300}"
    }

    fn check(raw: &str) -> Result<(), TestCaseError> {
        let safe = reason_safe(raw);
        prop_assert!(!safe.contains(['<', '>']), "{:?} -> {:?}", raw, safe);
        prop_assert!(!safe.chars().any(|c| c.is_control() || is_invisible(c)));
        prop_assert!(!safe.chars().any(|c| c.is_whitespace() && c != ' '));
        prop_assert!(!safe.contains("  "));
        prop_assert_eq!(safe.trim(), safe.as_str());
        prop_assert!(safe.chars().count() <= MAX_REASON_CHARS);
        prop_assert_eq!(reason_safe(&safe), safe.clone());
        Ok(())
    }

    proptest! {
        #[test]
        fn any_text_comes_out_safe(raw in any::<String>()) {
            check(&raw)?;
        }

        #[test]
        fn markup_comes_out_safe(raw in markup_heavy()) {
            check(&raw)?;
        }

        /// Plain text that is already tidy passes through unchanged.
        #[test]
        fn tidy_text_is_kept(words in prop::collection::vec("[A-Za-z0-9&;.,'()é-]{1,12}", 0..12)) {
            let text = words.join(" ");
            prop_assume!(text.chars().count() <= MAX_REASON_CHARS);
            prop_assert_eq!(reason_safe(&text), text);
        }
    }
}
