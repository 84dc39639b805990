//! `jetsink decrypt`'s input, read through the one bounded reader ([`crate::files`]), so a
//! device, a FIFO, an endless pipe or a file larger than memory ends in an error naming
//! it instead of filling memory:
//!
//! - a named file must be a regular file; a Parquet file (found by its magic bytes) is
//!   read whole, at most 1 GiB ([`crate::files::Kind::Parquet`]: its footer is at its
//!   end);
//! - otherwise the input (a file or stdin) is read **line by line**, each line at most 256
//!   MiB ([`crate::files::Kind::Records`]), and each JSON Lines record handed on as soon
//!   as it is read, so a directory of JSON Lines files piped in costs one line of memory;
//! - when its first non-empty line is not JSON by itself (a pretty-printed document),
//!   the whole input is one JSON document (an object, or an array of objects), at most
//!   256 MiB; if it is not, its lines are read as JSON Lines after all.

use std::io::{BufRead, BufReader, Read, Seek};
use std::path::Path;

use serde_json::{Map, Value};

use super::parquet_input;
use crate::files::{self, Kind, Line};

/// One record, or why it is not one.
pub type Record = Result<Map<String, Value>, String>;

/// The records of one JSON document (object or array of objects), else one per non-empty
/// line.
pub fn records(text: &str) -> Vec<Record> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => document(v),
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| line(l.as_bytes()))
            .collect(),
    }
}

/// The records of a parsed document: its objects.
fn document(v: Value) -> Vec<Record> {
    match v {
        Value::Array(items) => items.into_iter().map(object).collect(),
        v => vec![object(v)],
    }
}

fn object(v: Value) -> Record {
    match v {
        Value::Object(m) => Ok(m),
        _ => Err("not a JSON object".to_string()),
    }
}

/// One line of JSON Lines as a record.
fn line(bytes: &[u8]) -> Record {
    serde_json::from_slice::<Value>(bytes)
        .map_err(|e| format!("not JSON: {e}"))
        .and_then(object)
}

/// Hands every record of the input at `path` (`None` or `-`: stdin) to `each`, in order;
/// an error when the input cannot be read (after the records read before it).
pub fn each_record(path: Option<&Path>, each: &mut dyn FnMut(Record)) -> Result<(), String> {
    let Some(path) = path.filter(|p| p.as_os_str() != "-") else {
        return stream(std::io::stdin().lock(), "stdin", each);
    };
    let shown = path.display().to_string();
    let mut file = files::open_regular(path, Kind::Records).map_err(|e| e.to_string())?;
    let mut head = [0u8; 4];
    let parquet = file.read_exact(&mut head).is_ok() && &head == parquet_input::MAGIC;
    if parquet {
        let data = files::read(path, Kind::Parquet).map_err(|e| e.to_string())?;
        parquet_input::records(data, &shown)?
            .into_iter()
            .for_each(&mut *each);
        return Ok(());
    }
    file.rewind()
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    stream(BufReader::new(file), &shown, each)
}

/// Reads JSON Lines (or one JSON document) from `reader` with the bounds above.
fn stream(
    mut reader: impl BufRead,
    name: &str,
    each: &mut dyn FnMut(Record),
) -> Result<(), String> {
    let mut buf = Vec::new();
    let next = |reader: &mut dyn BufRead, buf: &mut Vec<u8>| {
        files::read_line(reader, buf, Kind::Records, name).map_err(|e| e.to_string())
    };
    // The first non-empty line decides: JSON by itself, or the start of a document.
    loop {
        if next(&mut reader, &mut buf)? == Line::End {
            return Ok(());
        }
        if !buf.trim_ascii().is_empty() {
            break;
        }
    }
    match serde_json::from_slice::<Value>(&buf) {
        Ok(v) => document(v).into_iter().for_each(&mut *each),
        Err(_) => {
            let rest =
                files::read_stream(&mut reader, Kind::Records, name).map_err(|e| e.to_string())?;
            if (buf.len() + rest.len()) as u64 > Kind::Records.limit() {
                return Err(files::FileError::TooLarge {
                    path: name.into(),
                    limit: Kind::Records.limit(),
                    kind: Kind::Records,
                }
                .to_string());
            }
            buf.extend_from_slice(&rest);
            let text = String::from_utf8_lossy(&buf);
            records(&text).into_iter().for_each(&mut *each);
            return Ok(());
        }
    }
    loop {
        if next(&mut reader, &mut buf)? == Line::End {
            return Ok(());
        }
        if !buf.trim_ascii().is_empty() {
            each(line(&buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &[u8]) -> (Vec<Record>, Result<(), String>) {
        let mut got = Vec::new();
        let r = stream(input, "in", &mut |r| got.push(r));
        (got, r)
    }

    #[test]
    fn input_is_one_record_an_array_or_json_lines() {
        assert_eq!(records(r#"{"a":1}"#).len(), 1);
        assert_eq!(records(r#"[{"a":1},{"a":2}]"#).len(), 2);
        let lines = records("{\"a\":1}\n\n{\"a\":2}\nnot json\n");
        assert_eq!(lines.len(), 3);
        assert!(lines[2].is_err());
    }

    #[test]
    fn a_stream_gives_the_same_records_as_the_whole_text() {
        for text in [
            "{\"a\":1}\n\n{\"a\":2}\nnot json\n",
            "[{\"a\":1},\n {\"a\":2}]\n",
            "{\n  \"a\": 1\n}\n",
            "\n\n[{\"a\":1},{\"a\":2}]",
            "{\"a\":1}",
            "not json\n{\"a\":1}\n",
            "1\n{\"a\":1}\n",
            "",
        ] {
            let (got, r) = all(text.as_bytes());
            assert!(r.is_ok(), "{text:?}");
            assert_eq!(got, records(text), "{text:?}");
        }
    }

    #[test]
    fn an_endless_line_is_refused_after_the_records_before_it() {
        let endless = b"{\"a\":1}\n".chain(std::io::repeat(b' ').take(300 << 20));
        let mut got = Vec::new();
        let e = stream(BufReader::new(endless), "stdin", &mut |r| got.push(r)).unwrap_err();
        assert_eq!(got.len(), 1);
        assert_eq!(
            e,
            "stdin is larger than 256 MiB, the most a record input may hold"
        );
    }

    #[test]
    fn a_device_or_a_directory_is_refused_without_reading() {
        let e = each_record(Some(Path::new("/dev/zero")), &mut |_| {}).unwrap_err();
        assert_eq!(e, "/dev/zero is a character device, not a regular file");
        let dir = tempfile::tempdir().unwrap();
        let e = each_record(Some(dir.path()), &mut |_| {}).unwrap_err();
        assert!(e.ends_with("is a directory, not a regular file"), "{e}");
    }
}
