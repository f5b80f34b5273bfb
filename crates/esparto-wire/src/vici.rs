//! VICI, strongSwan's control protocol (`src/libcharon/plugins/vici/README.md`
//! in strongSwan's source): the framing, packets and messages `swanctl` and
//! the `vici` client libraries speak.
//!
//! Three layers:
//!
//! - **segments**: a 32-bit big-endian length, then that many bytes, at most
//!   [`MAX_SEGMENT`]; [`segment_len`] checks a header before anything is
//!   buffered, so a client announcing 4 GiB costs four bytes;
//! - **packets** ([`Packet`]): a type byte, for the named types an 8-bit
//!   length and a name, then the message;
//! - **messages**: a flat sequence of elements ([`Element`], read by
//!   [`Elements`] without allocating, every structural rule checked as it
//!   goes), or the owned tree [`Section`] built from them; [`Builder`]
//!   writes one.
//!
//! Values are blobs on the wire; strongSwan sends numbers and booleans as
//! strings (`"4500"`, `"yes"`), and so does everything here.

use crate::{Error, Result};

/// Largest segment (packet) accepted or sent: strongSwan's limit.
pub const MAX_SEGMENT: usize = 512 * 1024;
/// Deepest nesting of sections accepted. strongSwan's own messages nest
/// five deep (`list-sa`: SA, `child-sas`, child, …); a client's
/// `load-conn` four.
pub const MAX_DEPTH: usize = 16;
/// Bytes of the segment length header.
pub const HEADER_LEN: usize = 4;
/// Longest name (of a packet, section, key or list): an 8-bit length.
pub const MAX_NAME: usize = 255;
/// Longest value: a 16-bit length.
pub const MAX_VALUE: usize = 65_535;

/// The packet types (README "Packet layer").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// A named request message.
    CmdRequest = 0,
    /// The unnamed response to a request.
    CmdResponse = 1,
    /// The answer to a request for a command the server does not have.
    CmdUnknown = 2,
    /// A named event registration.
    EventRegister = 3,
    /// A named event deregistration.
    EventUnregister = 4,
    /// The answer to a successful (de-)registration.
    EventConfirm = 5,
    /// The answer to a (de-)registration for an event the server does not have.
    EventUnknown = 6,
    /// A named event message.
    Event = 7,
}

impl PacketType {
    /// The type with this number, if it is one.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::CmdRequest,
            1 => Self::CmdResponse,
            2 => Self::CmdUnknown,
            3 => Self::EventRegister,
            4 => Self::EventUnregister,
            5 => Self::EventConfirm,
            6 => Self::EventUnknown,
            7 => Self::Event,
            _ => return None,
        })
    }

    /// Whether a name follows the type byte.
    pub fn is_named(self) -> bool {
        matches!(
            self,
            Self::CmdRequest | Self::EventRegister | Self::EventUnregister | Self::Event
        )
    }

    /// Whether a message follows (the type and any name).
    pub fn has_message(self) -> bool {
        matches!(self, Self::CmdRequest | Self::CmdResponse | Self::Event)
    }
}

/// The length a segment header announces, checked against [`MAX_SEGMENT`].
/// An empty segment has no packet type and is malformed too.
pub fn segment_len(header: [u8; HEADER_LEN]) -> Result<usize> {
    let n = u32::from_be_bytes(header) as usize;
    if n == 0 {
        Err(Error::Malformed("vici segment is empty"))
    } else if n > MAX_SEGMENT {
        Err(Error::Malformed("vici segment longer than 512 KiB"))
    } else {
        Ok(n)
    }
}

/// One packet, borrowed from its segment (without the length header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// Its type.
    pub kind: PacketType,
    /// Its name (`""` for the unnamed types).
    pub name: &'a str,
    /// Its message (empty for the types without one).
    pub message: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Read a segment's packet. The message is not looked at; read it with
    /// [`Elements`] or [`Section::parse`].
    pub fn parse(segment: &'a [u8]) -> Result<Self> {
        let (&t, rest) = segment.split_first().ok_or(Error::Truncated)?;
        let kind = PacketType::from_u8(t).ok_or(Error::Malformed("vici packet type unknown"))?;
        let (name, rest) = if kind.is_named() {
            let (name, rest) = name(rest)?;
            (name, rest)
        } else {
            ("", rest)
        };
        if !kind.has_message() && !rest.is_empty() {
            return Err(Error::Malformed("vici packet has data after its end"));
        }
        Ok(Packet { kind, name, message: rest })
    }

    /// Append this packet as one segment (length header included) to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) -> Result<()> {
        let named = self.kind.is_named();
        if !named && !self.name.is_empty() {
            return Err(Error::Malformed("vici packet type has no name"));
        }
        if !self.kind.has_message() && !self.message.is_empty() {
            return Err(Error::Malformed("vici packet type has no message"));
        }
        if self.name.len() > MAX_NAME {
            return Err(Error::Malformed("vici name longer than 255 bytes"));
        }
        let len = 1 + if named { 1 + self.name.len() } else { 0 } + self.message.len();
        if len > MAX_SEGMENT {
            return Err(Error::Unsupported("vici packet longer than 512 KiB"));
        }
        out.reserve(HEADER_LEN + len);
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.push(self.kind as u8);
        if named {
            out.push(self.name.len() as u8);
            out.extend_from_slice(self.name.as_bytes());
        }
        out.extend_from_slice(self.message);
        Ok(())
    }
}

/// An 8-bit-length-prefixed name, then the rest.
fn name(b: &[u8]) -> Result<(&str, &[u8])> {
    let (&n, rest) = b.split_first().ok_or(Error::Truncated)?;
    let n = usize::from(n);
    if rest.len() < n {
        return Err(Error::Truncated);
    }
    let (s, rest) = rest.split_at(n);
    let s = core::str::from_utf8(s).map_err(|_| Error::Malformed("vici name is not UTF-8"))?;
    Ok((s, rest))
}

/// A 16-bit-length-prefixed value, then the rest.
fn value(b: &[u8]) -> Result<(&[u8], &[u8])> {
    if b.len() < 2 {
        return Err(Error::Truncated);
    }
    let n = usize::from(u16::from_be_bytes([b[0], b[1]]));
    let rest = &b[2..];
    if rest.len() < n {
        return Err(Error::Truncated);
    }
    Ok(rest.split_at(n))
}

/// The message element types (README "Message format").
mod kind {
    pub(super) const SECTION_START: u8 = 1;
    pub(super) const SECTION_END: u8 = 2;
    pub(super) const KEY_VALUE: u8 = 3;
    pub(super) const LIST_START: u8 = 4;
    pub(super) const LIST_ITEM: u8 = 5;
    pub(super) const LIST_END: u8 = 6;
}

/// One element of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element<'a> {
    /// A named section begins.
    SectionStart(&'a str),
    /// The innermost open section ends.
    SectionEnd,
    /// A key and its value, in the current section.
    KeyValue(&'a str, &'a [u8]),
    /// A named list begins.
    ListStart(&'a str),
    /// An item of the open list.
    ListItem(&'a [u8]),
    /// The open list ends.
    ListEnd,
}

/// The elements of a message, in order, each checked against the rules:
/// sections balanced and at most [`MAX_DEPTH`] deep, lists not nested and
/// holding only items, items only in lists, and everything closed at the
/// end. After the first error the iterator ends.
#[derive(Debug, Clone)]
pub struct Elements<'a> {
    rest: &'a [u8],
    depth: usize,
    in_list: bool,
    done: bool,
}

impl<'a> Elements<'a> {
    /// The elements of `message`.
    pub fn new(message: &'a [u8]) -> Self {
        Elements { rest: message, depth: 0, in_list: false, done: false }
    }

    fn step(&mut self) -> Result<Option<Element<'a>>> {
        let Some((&t, rest)) = self.rest.split_first() else {
            if self.in_list {
                return Err(Error::Malformed("vici list not closed"));
            }
            if self.depth > 0 {
                return Err(Error::Malformed("vici section not closed"));
            }
            return Ok(None);
        };
        if self.in_list && !matches!(t, kind::LIST_ITEM | kind::LIST_END) {
            return Err(Error::Malformed("vici list holds something other than items"));
        }
        let (e, rest) = match t {
            kind::SECTION_START => {
                let (n, rest) = name(rest)?;
                if self.depth >= MAX_DEPTH {
                    return Err(Error::Unsupported("vici sections nested too deep"));
                }
                self.depth += 1;
                (Element::SectionStart(n), rest)
            }
            kind::SECTION_END => {
                if self.depth == 0 {
                    return Err(Error::Malformed("vici section end without a start"));
                }
                self.depth -= 1;
                (Element::SectionEnd, rest)
            }
            kind::KEY_VALUE => {
                let (n, rest) = name(rest)?;
                let (v, rest) = value(rest)?;
                (Element::KeyValue(n, v), rest)
            }
            kind::LIST_START => {
                let (n, rest) = name(rest)?;
                self.in_list = true;
                (Element::ListStart(n), rest)
            }
            kind::LIST_ITEM => {
                if !self.in_list {
                    return Err(Error::Malformed("vici list item outside a list"));
                }
                let (v, rest) = value(rest)?;
                (Element::ListItem(v), rest)
            }
            kind::LIST_END => {
                if !self.in_list {
                    return Err(Error::Malformed("vici list end without a start"));
                }
                self.in_list = false;
                (Element::ListEnd, rest)
            }
            _ => return Err(Error::Malformed("vici element type unknown")),
        };
        self.rest = rest;
        Ok(Some(e))
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Result<Element<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Check a whole message without keeping anything.
pub fn check_message(message: &[u8]) -> Result<()> {
    Elements::new(message).try_for_each(|e| e.map(|_| ()))
}

/// A value in a [`Section`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A key's value.
    Str(Vec<u8>),
    /// A list's items.
    List(Vec<Vec<u8>>),
    /// A sub-section.
    Section(Section),
}

/// A section (or a whole message, the implicit root section): its entries
/// in the order they came. Keys should be unique (the README says so);
/// lookups return the first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Section {
    /// Names and values, in order.
    pub entries: Vec<(String, Value)>,
}

impl Section {
    /// Read a whole message.
    pub fn parse(message: &[u8]) -> Result<Section> {
        let mut stack: Vec<(String, Section)> = Vec::new();
        let mut cur = Section::default();
        let mut list: Option<(String, Vec<Vec<u8>>)> = None;
        for e in Elements::new(message) {
            match e? {
                Element::SectionStart(n) => {
                    stack.push((n.to_string(), std::mem::take(&mut cur)));
                }
                Element::SectionEnd => {
                    // `Elements` checked the balance.
                    let (n, parent) = stack.pop().ok_or(Error::Malformed("vici section end without a start"))?;
                    let done = std::mem::replace(&mut cur, parent);
                    cur.entries.push((n, Value::Section(done)));
                }
                Element::KeyValue(k, v) => cur.entries.push((k.to_string(), Value::Str(v.to_vec()))),
                Element::ListStart(n) => list = Some((n.to_string(), Vec::new())),
                Element::ListItem(v) => {
                    if let Some((_, items)) = list.as_mut() {
                        items.push(v.to_vec());
                    }
                }
                Element::ListEnd => {
                    if let Some((n, items)) = list.take() {
                        cur.entries.push((n, Value::List(items)));
                    }
                }
            }
        }
        Ok(cur)
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The value of `key` as text, if it is a key-value in UTF-8.
    pub fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Value::Str(v) => core::str::from_utf8(v).ok(),
            _ => None,
        }
    }

    /// The sub-section `key`.
    pub fn section(&self, key: &str) -> Option<&Section> {
        match self.get(key)? {
            Value::Section(s) => Some(s),
            _ => None,
        }
    }

    /// The list `key`.
    pub fn list(&self, key: &str) -> Option<&[Vec<u8>]> {
        match self.get(key)? {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// This section's entries as a message (the root section) into `b`.
    pub fn emit(&self, b: &mut Builder) {
        for (k, v) in &self.entries {
            match v {
                Value::Str(s) => {
                    b.kv(k, s);
                }
                Value::List(items) => {
                    b.begin_list(k);
                    for i in items {
                        b.item(i);
                    }
                    b.end_list();
                }
                Value::Section(s) => {
                    b.begin(k);
                    s.emit(b);
                    b.end();
                }
            }
        }
    }
}

/// Writes a message element by element. Mistakes (a name or value too
/// long, an unbalanced end, a key inside a list) are kept and returned by
/// [`finish`](Self::finish), so a chain of calls needs one check.
#[derive(Debug, Default)]
pub struct Builder {
    buf: Vec<u8>,
    depth: usize,
    in_list: bool,
    error: Option<Error>,
}

impl Builder {
    /// An empty message.
    pub fn new() -> Self {
        Self::default()
    }

    fn fail(&mut self, e: &'static str) {
        self.error.get_or_insert(Error::Malformed(e));
    }

    fn name(&mut self, n: &str) {
        if n.len() > MAX_NAME {
            self.fail("vici name longer than 255 bytes");
            return;
        }
        self.buf.push(n.len() as u8);
        self.buf.extend_from_slice(n.as_bytes());
    }

    fn value(&mut self, v: &[u8]) {
        if v.len() > MAX_VALUE {
            self.fail("vici value longer than 65535 bytes");
            return;
        }
        self.buf.extend_from_slice(&(v.len() as u16).to_be_bytes());
        self.buf.extend_from_slice(v);
    }

    fn not_in_list(&mut self) -> bool {
        if self.in_list {
            self.fail("vici list holds something other than items");
        }
        !self.in_list
    }

    /// `key = value`.
    pub fn kv(&mut self, key: &str, value: impl AsRef<[u8]>) -> &mut Self {
        if self.not_in_list() {
            self.buf.push(kind::KEY_VALUE);
            self.name(key);
            self.value(value.as_ref());
        }
        self
    }

    /// `key = value` for anything displayed (numbers: strongSwan sends
    /// them as decimal strings).
    pub fn kv_display(&mut self, key: &str, value: impl core::fmt::Display) -> &mut Self {
        self.kv(key, value.to_string())
    }

    /// `key = yes` or `key = no`.
    pub fn kv_bool(&mut self, key: &str, value: bool) -> &mut Self {
        self.kv(key, if value { "yes" } else { "no" })
    }

    /// Open section `name`.
    pub fn begin(&mut self, name: &str) -> &mut Self {
        if self.not_in_list() {
            self.buf.push(kind::SECTION_START);
            self.name(name);
            self.depth += 1;
        }
        self
    }

    /// Close the innermost section.
    pub fn end(&mut self) -> &mut Self {
        if self.not_in_list() {
            if self.depth == 0 {
                self.fail("vici section end without a start");
            } else {
                self.depth -= 1;
                self.buf.push(kind::SECTION_END);
            }
        }
        self
    }

    /// Open list `name`.
    pub fn begin_list(&mut self, name: &str) -> &mut Self {
        if self.not_in_list() {
            self.buf.push(kind::LIST_START);
            self.name(name);
            self.in_list = true;
        }
        self
    }

    /// An item of the open list.
    pub fn item(&mut self, value: impl AsRef<[u8]>) -> &mut Self {
        if !self.in_list {
            self.fail("vici list item outside a list");
        } else {
            self.buf.push(kind::LIST_ITEM);
            self.value(value.as_ref());
        }
        self
    }

    /// Close the open list.
    pub fn end_list(&mut self) -> &mut Self {
        if !self.in_list {
            self.fail("vici list end without a start");
        } else {
            self.in_list = false;
            self.buf.push(kind::LIST_END);
        }
        self
    }

    /// A list of `items` named `name`.
    pub fn list<I: AsRef<[u8]>>(&mut self, name: &str, items: impl IntoIterator<Item = I>) -> &mut Self {
        self.begin_list(name);
        for i in items {
            self.item(i);
        }
        self.end_list()
    }

    /// The message, or the first mistake made building it.
    pub fn finish(self) -> Result<Vec<u8>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.in_list {
            return Err(Error::Malformed("vici list not closed"));
        }
        if self.depth > 0 {
            return Err(Error::Malformed("vici section not closed"));
        }
        Ok(self.buf)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The README's encoding example, byte for byte.
    const README_EXAMPLE: &[u8] = &[
        3, 4, b'k', b'e', b'y', b'1', 0, 6, b'v', b'a', b'l', b'u', b'e', b'1', //
        1, 8, b's', b'e', b'c', b't', b'i', b'o', b'n', b'1', //
        1, 11, b's', b'u', b'b', b'-', b's', b'e', b'c', b't', b'i', b'o', b'n', //
        3, 4, b'k', b'e', b'y', b'2', 0, 6, b'v', b'a', b'l', b'u', b'e', b'2', //
        2, //
        4, 5, b'l', b'i', b's', b't', b'1', //
        5, 0, 5, b'i', b't', b'e', b'm', b'1', //
        5, 0, 5, b'i', b't', b'e', b'm', b'2', //
        6, //
        2,
    ];

    #[test]
    fn readme_example_parses_and_builds_to_the_same_bytes() {
        let s = Section::parse(README_EXAMPLE).unwrap();
        assert_eq!(s.str("key1"), Some("value1"));
        let s1 = s.section("section1").unwrap();
        assert_eq!(s1.section("sub-section").unwrap().str("key2"), Some("value2"));
        assert_eq!(s1.list("list1").unwrap(), &[b"item1".to_vec(), b"item2".to_vec()]);

        let mut b = Builder::new();
        b.kv("key1", "value1")
            .begin("section1")
            .begin("sub-section")
            .kv("key2", "value2")
            .end()
            .list("list1", ["item1", "item2"])
            .end();
        assert_eq!(b.finish().unwrap(), README_EXAMPLE);

        let mut b = Builder::new();
        s.emit(&mut b);
        assert_eq!(b.finish().unwrap(), README_EXAMPLE);
    }

    #[test]
    fn packets_round_trip() {
        for (kind, name, msg) in [
            (PacketType::CmdRequest, "list-sas", README_EXAMPLE),
            (PacketType::CmdResponse, "", README_EXAMPLE),
            (PacketType::CmdUnknown, "", &[][..]),
            (PacketType::EventRegister, "list-sa", &[][..]),
            (PacketType::EventUnregister, "list-sa", &[][..]),
            (PacketType::EventConfirm, "", &[][..]),
            (PacketType::EventUnknown, "", &[][..]),
            (PacketType::Event, "control-log", README_EXAMPLE),
        ] {
            let p = Packet { kind, name, message: msg };
            let mut out = Vec::new();
            p.emit(&mut out).unwrap();
            let len = segment_len(out[..4].try_into().unwrap()).unwrap();
            assert_eq!(len, out.len() - 4);
            assert_eq!(Packet::parse(&out[4..]).unwrap(), p);
        }
        // A registration as swanctl sends it.
        assert_eq!(
            Packet::parse(&[3, 11, b'c', b'o', b'n', b't', b'r', b'o', b'l', b'-', b'l', b'o', b'g']).unwrap(),
            Packet { kind: PacketType::EventRegister, name: "control-log", message: &[] }
        );
    }

    #[test]
    fn segment_headers_are_bounded() {
        assert_eq!(segment_len([0, 8, 0, 0]).unwrap(), MAX_SEGMENT);
        assert!(segment_len([0, 8, 0, 1]).is_err());
        assert!(segment_len([0xff; 4]).is_err(), "4 GiB");
        assert!(segment_len([0; 4]).is_err(), "empty");
    }

    #[test]
    fn malformed_packets_say_what_is_wrong() {
        assert_eq!(Packet::parse(&[]), Err(Error::Truncated));
        assert_eq!(Packet::parse(&[8]), Err(Error::Malformed("vici packet type unknown")));
        assert_eq!(Packet::parse(&[0]), Err(Error::Truncated), "a request without its name");
        assert_eq!(Packet::parse(&[0, 5, b'a']), Err(Error::Truncated));
        assert_eq!(Packet::parse(&[0, 1, 0xff]), Err(Error::Malformed("vici name is not UTF-8")));
        assert_eq!(Packet::parse(&[5, 1]), Err(Error::Malformed("vici packet has data after its end")));
        let p = Packet { kind: PacketType::CmdResponse, name: "x", message: &[] };
        assert!(p.emit(&mut Vec::new()).is_err());
        let big = vec![0u8; MAX_SEGMENT];
        let p = Packet { kind: PacketType::CmdResponse, name: "", message: &big };
        assert_eq!(p.emit(&mut Vec::new()), Err(Error::Unsupported("vici packet longer than 512 KiB")));
    }

    #[test]
    fn malformed_messages_say_what_is_wrong() {
        let cases: &[(&[u8], Error)] = &[
            (&[2], Error::Malformed("vici section end without a start")),
            (&[1, 1, b's'], Error::Malformed("vici section not closed")),
            (&[4, 1, b'l'], Error::Malformed("vici list not closed")),
            (&[4, 1, b'l', 4, 1, b'm'], Error::Malformed("vici list holds something other than items")),
            (&[4, 1, b'l', 3, 1, b'k', 0, 0], Error::Malformed("vici list holds something other than items")),
            (&[5, 0, 0], Error::Malformed("vici list item outside a list")),
            (&[6], Error::Malformed("vici list end without a start")),
            (&[9], Error::Malformed("vici element type unknown")),
            (&[3, 1, b'k', 0], Error::Truncated),
            (&[3, 1, b'k', 0, 5, b'a'], Error::Truncated),
            (&[3, 3, b'k'], Error::Truncated),
        ];
        for (m, want) in cases {
            assert_eq!(check_message(m), Err(*want), "{m:?}");
            assert_eq!(Section::parse(m), Err(*want), "{m:?}");
        }
        let mut deep = Vec::new();
        for _ in 0..=MAX_DEPTH {
            deep.extend_from_slice(&[1, 1, b's']);
        }
        assert_eq!(check_message(&deep), Err(Error::Unsupported("vici sections nested too deep")));
        let mut ok = Vec::new();
        for _ in 0..MAX_DEPTH {
            ok.extend_from_slice(&[1, 1, b's']);
        }
        ok.extend(std::iter::repeat_n(2, MAX_DEPTH));
        assert_eq!(check_message(&ok), Ok(()));
        // Empty lists and sections are fine.
        assert_eq!(check_message(&[4, 1, b'l', 6, 1, 0, 2]), Ok(()));
    }

    #[test]
    fn builder_keeps_its_first_mistake() {
        let mut b = Builder::new();
        b.begin("a");
        assert_eq!(b.finish(), Err(Error::Malformed("vici section not closed")));
        let mut b = Builder::new();
        b.end().kv("k", "v");
        assert_eq!(b.finish(), Err(Error::Malformed("vici section end without a start")));
        let mut b = Builder::new();
        b.kv(&"k".repeat(256), "v");
        assert_eq!(b.finish(), Err(Error::Malformed("vici name longer than 255 bytes")));
        let mut b = Builder::new();
        b.kv("k", vec![0u8; MAX_VALUE + 1]);
        assert_eq!(b.finish(), Err(Error::Malformed("vici value longer than 65535 bytes")));
        let mut b = Builder::new();
        b.begin_list("l").kv("k", "v").end_list();
        assert_eq!(b.finish(), Err(Error::Malformed("vici list holds something other than items")));
        let mut b = Builder::new();
        b.item("x");
        assert_eq!(b.finish(), Err(Error::Malformed("vici list item outside a list")));
        let mut b = Builder::new();
        b.kv_display("port", 4500).kv_bool("up", true);
        let s = Section::parse(&b.finish().unwrap()).unwrap();
        assert_eq!((s.str("port"), s.str("up")), (Some("4500"), Some("yes")));
    }
}
