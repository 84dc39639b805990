//! The associated data that binds a sealed value to its message: stream, stream sequence,
//! subject, key id and which part of the message it is (the payload, or one header
//! value). AES-GCM authenticates it without storing it, so a ciphertext copied to another
//! row, message, stream or header fails to open. Pure.
//!
//! Every field is length-prefixed (u32, big-endian) after a versioned label, so no two
//! different bindings serialize to the same bytes (`a` + `bc` differs from `ab` + `c`).

/// Label and version at the start of the associated data.
const LABEL: &[u8] = b"jetsink-aad-v1";

/// Which part of a message a sealed value holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part<'a> {
    /// The payload.
    Payload,
    /// Value `index` (0-based) of the header `name` (compared as written).
    Header(&'a str, usize),
}

/// What a sealed value belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding<'a> {
    /// The stream that stored the message.
    pub stream: &'a str,
    /// Its stream sequence.
    pub stream_sequence: u64,
    /// Its subject.
    pub subject: &'a str,
    /// The part of the message.
    pub part: Part<'a>,
}

impl Binding<'_> {
    /// The associated data for sealing with `key_id`.
    pub fn aad(&self, key_id: &str) -> Vec<u8> {
        let mut out = Vec::new();
        self.aad_into(key_id, &mut out);
        out
    }

    /// The associated data for sealing with `key_id`, in `out` (cleared first), so a batch
    /// reuses one buffer.
    pub fn aad_into(&self, key_id: &str, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(LABEL.len() + 40 + self.stream.len() + self.subject.len() + key_id.len());
        out.extend_from_slice(LABEL);
        field(out, self.stream.as_bytes());
        field(out, &self.stream_sequence.to_be_bytes());
        field(out, self.subject.as_bytes());
        field(out, key_id.as_bytes());
        match self.part {
            Part::Payload => field(out, b"payload"),
            Part::Header(name, index) => {
                field(out, b"header");
                field(out, name.as_bytes());
                field(out, &(index as u64).to_be_bytes());
            }
        }
    }
}

fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b<'a>(stream: &'a str, seq: u64, subject: &'a str, part: Part<'a>) -> Binding<'a> {
        Binding {
            stream,
            stream_sequence: seq,
            subject,
            part,
        }
    }

    #[test]
    fn every_field_changes_the_associated_data() {
        let base = b("S", 1, "a.b", Part::Payload).aad("k1");
        for other in [
            b("T", 1, "a.b", Part::Payload).aad("k1"),
            b("S", 2, "a.b", Part::Payload).aad("k1"),
            b("S", 1, "a.c", Part::Payload).aad("k1"),
            b("S", 1, "a.b", Part::Payload).aad("k2"),
            b("S", 1, "a.b", Part::Header("X", 0)).aad("k1"),
        ] {
            assert_ne!(base, other);
        }
        assert_ne!(
            b("S", 1, "a.b", Part::Header("X", 0)).aad("k1"),
            b("S", 1, "a.b", Part::Header("X", 1)).aad("k1")
        );
    }

    #[test]
    fn fields_cannot_shift_into_each_other() {
        assert_ne!(
            b("ab", 1, "c", Part::Payload).aad("k"),
            b("a", 1, "bc", Part::Payload).aad("k")
        );
    }
}
