//! Inline commands (a line of words, as a telnet user types them) split as
//! Redis splits them: words apart by spaces or tabs; a word in double
//! quotes may hold spaces and the escapes `\xHH`, `\n`, `\r`, `\t`, `\b`,
//! `\a`, `\\` and `\"`; a word in single quotes holds everything literally
//! but `\'`. A closing quote must end its word; a quote left open is an
//! error.

/// The words of one inline line (without its line end).
pub fn split_words(line: &[u8]) -> Result<Vec<Vec<u8>>, Unbalanced> {
    let mut words = Vec::new();
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i == line.len() {
            return Ok(words);
        }
        let (word, next) = match line[i] {
            b'"' => double_quoted(line, i + 1)?,
            b'\'' => single_quoted(line, i + 1)?,
            _ => {
                let end = line[i..]
                    .iter()
                    .position(|&b| is_space(b))
                    .map_or(line.len(), |n| i + n);
                (line[i..end].to_vec(), end)
            }
        };
        words.push(word);
        i = next;
    }
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c)
}

/// A quote left open, or followed by more of its word.
#[derive(Debug, PartialEq)]
pub struct Unbalanced;

fn unbalanced() -> Unbalanced {
    Unbalanced
}

/// After a closing quote at `at`: the word must end there.
fn closed(line: &[u8], at: usize) -> Result<usize, Unbalanced> {
    match line.get(at + 1) {
        None => Ok(at + 1),
        Some(&b) if is_space(b) => Ok(at + 1),
        Some(_) => Err(unbalanced()),
    }
}

fn double_quoted(line: &[u8], mut i: usize) -> Result<(Vec<u8>, usize), Unbalanced> {
    let mut word = Vec::new();
    while i < line.len() {
        match line[i] {
            b'"' => return Ok((word, closed(line, i)?)),
            b'\\'
                if i + 3 < line.len()
                    && line[i + 1] == b'x'
                    && hex(line[i + 2]).is_some()
                    && hex(line[i + 3]).is_some() =>
            {
                let (hi, lo) = (hex(line[i + 2]).unwrap_or(0), hex(line[i + 3]).unwrap_or(0));
                word.push(hi << 4 | lo);
                i += 4;
            }
            b'\\' if i + 1 < line.len() => {
                word.push(match line[i + 1] {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                i += 2;
            }
            b => {
                word.push(b);
                i += 1;
            }
        }
    }
    Err(unbalanced())
}

fn single_quoted(line: &[u8], mut i: usize) -> Result<(Vec<u8>, usize), Unbalanced> {
    let mut word = Vec::new();
    while i < line.len() {
        match line[i] {
            b'\'' => return Ok((word, closed(line, i)?)),
            b'\\' if line.get(i + 1) == Some(&b'\'') => {
                word.push(b'\'');
                i += 2;
            }
            b => {
                word.push(b);
                i += 1;
            }
        }
    }
    Err(unbalanced())
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Result<Vec<String>, Unbalanced> {
        split_words(line.as_bytes()).map(|ws| {
            ws.into_iter()
                .map(|w| String::from_utf8_lossy(&w).into_owned())
                .collect()
        })
    }

    #[test]
    fn quotes_and_escapes_as_redis_reads_them() {
        assert_eq!(
            words("TRYHOLD inv \"a b\"").unwrap(),
            ["TRYHOLD", "inv", "a b"]
        );
        assert_eq!(
            words("SET k \"\\x41\\n\\\"\"").unwrap(),
            ["SET", "k", "A\n\""]
        );
        assert_eq!(words("ECHO 'it\\'s \\n'").unwrap(), ["ECHO", "it's \\n"]);
        assert_eq!(words("  a\t\tb  ").unwrap(), ["a", "b"]);
        assert_eq!(words("ECHO \"\"").unwrap(), ["ECHO", ""]);
        assert_eq!(split_words(b"K \"\\xff\"").unwrap()[1], vec![0xff]);
    }

    #[test]
    fn a_quote_left_open_or_glued_is_an_error() {
        for bad in ["ECHO \"open", "ECHO 'open", "ECHO \"a\"b", "ECHO 'a'b"] {
            assert!(words(bad).is_err(), "{bad}");
        }
    }
}
