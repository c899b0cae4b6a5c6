//! Parameter markers: PEP 249's `qmark` (`?`) and `numeric` (`:1`) styles rewritten to the
//! engine's `$1`, `$2`, … outside string literals, quoted names and comments. Used for every
//! statement run with parameters; it must not change any other character of the text.

/// `sql` with `?` → `$n` (numbered in order), `?n` and `:n` → `$n`; `$n` is kept. Returns the
/// text and the highest parameter number it refers to.
pub fn rewrite(sql: &str) -> (String, usize) {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len() + 8);
    let mut next = 0usize;
    let mut highest = 0usize;
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        match bytes[i] {
            q @ (b'\'' | b'"' | b'`') => {
                // Quoted: up to the closing quote; a doubled quote is part of the text.
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == q {
                        if bytes.get(i + 1) == Some(&q) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    i += 1;
                }
                i += 2;
            }
            b'?' | b':' if bytes[i] == b'?' || numeric_marker(bytes, i) => {
                // `?` alone takes the next number; `?N` and `:N` name theirs.
                let digits = count_digits(&bytes[i + 1..]);
                let n = if digits > 0 {
                    sql[i + 1..i + 1 + digits].parse().unwrap_or(usize::MAX)
                } else {
                    next += 1;
                    next
                };
                out.push_str(&sql[copied..i]);
                out.push('$');
                out.push_str(&n.to_string());
                highest = highest.max(n);
                i += 1 + digits;
                copied = i;
            }
            b'$' => {
                let digits = count_digits(&bytes[i + 1..]);
                if digits > 0 {
                    let n: usize = sql[i + 1..i + 1 + digits].parse().unwrap_or(usize::MAX);
                    highest = highest.max(n);
                }
                i += 1 + digits;
            }
            _ => i += 1,
        }
    }
    out.push_str(&sql[copied.min(sql.len())..]);
    (out, highest)
}

fn count_digits(b: &[u8]) -> usize {
    b.iter().take_while(|c| c.is_ascii_digit()).count()
}

/// A `:` starts a numeric marker when digits follow and it does not continue a name, a
/// number, a closing bracket or another `:` (`a::int`, `x[1:2]` are left alone).
fn numeric_marker(b: &[u8], i: usize) -> bool {
    if count_digits(&b[i + 1..]) == 0 {
        return false;
    }
    let before = b[..i].iter().rev().find(|c| !c.is_ascii_whitespace());
    !matches!(before, Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'_' | b']' | b')' | b':' | b'\'' | b'"'))
}

/// The first word of a statement, upper-cased (`SELECT`, `INSERT`, …).
pub fn first_word(sql: &str) -> String {
    sql.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase()
}
