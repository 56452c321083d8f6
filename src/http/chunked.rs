//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally.
//!
//! This file owns turning a chunked body back into bytes. It consumes only whole
//! syntactic units, so it can be fed whatever has arrived; it requires CRLF
//! everywhere (a bare LF inside a chunked body is a known smuggling vector), it
//! never buffers more than one size line or trailer line, and it checks the
//! body size against `max_body` before the data arrives.

use super::head::split_field_line;
use super::parse_error::ParseError;
use super::parsing::ParseLimits;
use super::syntax::{find_lf, is_field_value_byte, skip_ows, strip_required_cr, token_len};

/// Most bytes of chunk extensions allowed on one chunk-size line; extensions are
/// meaningless to us, so a long run of them is only a way to make us buffer.
pub const MAX_CHUNK_EXT_BYTES: usize = 256;

/// Longest chunk-size line (size digits plus extensions, without CRLF).
pub(super) const MAX_CHUNK_LINE: usize = MAX_CHUNK_EXT_BYTES + 32;

/// Where a chunked body decoder is in the grammar:
///
/// ```text
/// chunked-body   = *chunk last-chunk trailer-section CRLF
/// chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
/// chunk-size     = 1*HEXDIG
/// last-chunk     = 1*("0") [ chunk-ext ] CRLF
/// chunk-data     = 1*OCTET ; a sequence of chunk-size octets
/// trailer-section = *( field-line CRLF )
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk-data with this many bytes still to come.
    Data(u64),
    /// Expecting the CRLF that ends chunk-data.
    DataEnd,
    /// After the last chunk, expecting trailer lines or the final empty line.
    Trailers,
    Done,
}

/// An incremental chunked-body decoder. It consumes only whole syntactic units
/// (a full size line, a full trailer line), so it can be fed whatever has arrived
/// and be told later about the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkedDecoder {
    state: ChunkState,
    /// De-chunked bytes so far (checked against `max_body`).
    total: u64,
    trailer_bytes: usize,
    trailer_fields: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    pub fn new() -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            total: 0,
            trailer_bytes: 0,
            trailer_fields: 0,
        }
    }

    /// True once the last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decodes as much of `input` as is complete, appending chunk data to `body`,
    /// and returns how many bytes of `input` it used (the caller drops them and
    /// passes the rest again with more bytes appended).
    pub fn decode(
        &mut self,
        input: &[u8],
        body: &mut Vec<u8>,
        limits: &ParseLimits,
    ) -> Result<usize, ParseError> {
        let mut pos = 0;
        loop {
            let rest = &input[pos..];
            let used = match self.state {
                ChunkState::Done => return Ok(pos),
                ChunkState::Size => self.size_line(rest, limits)?,
                ChunkState::Data(remaining) => self.data(rest, remaining, body),
                ChunkState::DataEnd => self.data_end(rest)?,
                ChunkState::Trailers => self.trailer_line(rest, limits)?,
            };
            match used {
                Some(n) => pos += n,
                None => return Ok(pos),
            }
        }
    }

    fn size_line(
        &mut self,
        rest: &[u8],
        limits: &ParseLimits,
    ) -> Result<Option<usize>, ParseError> {
        // +1: the CR of a line of exactly MAX_CHUNK_LINE. Checked before anything
        // else so a long line fails the same way however its bytes arrive.
        let seen = find_lf(rest).unwrap_or(rest.len());
        if seen > MAX_CHUNK_LINE + 1 {
            return Err(ParseError::ChunkLineTooLong);
        }
        let Some(i) = find_lf(rest) else {
            return Ok(None);
        };
        let line = match &rest[..i] {
            [line @ .., b'\r'] => line,
            _ => return Err(ParseError::InvalidChunkSize),
        };
        let size = parse_chunk_size_line(line)?;
        self.state = if size == 0 {
            ChunkState::Trailers
        } else {
            self.total = self
                .total
                .checked_add(size)
                .filter(|&t| t <= limits.max_body as u64)
                .ok_or(ParseError::PayloadTooLarge)?;
            ChunkState::Data(size)
        };
        Ok(Some(i + 1))
    }

    fn data(&mut self, rest: &[u8], remaining: u64, body: &mut Vec<u8>) -> Option<usize> {
        if rest.is_empty() {
            return None;
        }
        let n = rest
            .len()
            .min(usize::try_from(remaining).unwrap_or(usize::MAX));
        body.extend_from_slice(&rest[..n]);
        let left = remaining - n as u64;
        self.state = if left == 0 {
            ChunkState::DataEnd
        } else {
            ChunkState::Data(left)
        };
        Some(n)
    }

    fn data_end(&mut self, rest: &[u8]) -> Result<Option<usize>, ParseError> {
        match rest {
            [] | [b'\r'] => Ok(None),
            [b'\r', b'\n', ..] => {
                self.state = ChunkState::Size;
                Ok(Some(2))
            }
            _ => Err(ParseError::MissingChunkTerminator),
        }
    }

    /// Trailers are validated like headers, counted against the header limits,
    /// and discarded: nothing we do depends on them.
    fn trailer_line(
        &mut self,
        rest: &[u8],
        limits: &ParseLimits,
    ) -> Result<Option<usize>, ParseError> {
        let Some(i) = find_lf(rest) else {
            return if self.trailer_bytes + rest.len() > limits.max_header_bytes {
                Err(ParseError::HeadersTooLarge)
            } else {
                Ok(None)
            };
        };
        self.trailer_bytes += i + 1;
        if self.trailer_bytes > limits.max_header_bytes {
            return Err(ParseError::HeadersTooLarge);
        }
        let line = strip_required_cr(&rest[..i])?;
        if line.is_empty() {
            self.state = ChunkState::Done;
            return Ok(Some(i + 1));
        }
        self.trailer_fields += 1;
        if self.trailer_fields > limits.max_headers {
            return Err(ParseError::HeadersTooLarge);
        }
        split_field_line(line)?;
        Ok(Some(i + 1))
    }
}

/// `chunk-size [ chunk-ext ]`, without the CRLF.
fn parse_chunk_size_line(line: &[u8]) -> Result<u64, ParseError> {
    if line.len() > MAX_CHUNK_LINE {
        return Err(ParseError::ChunkLineTooLong);
    }
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err(ParseError::InvalidChunkSize);
    }
    let size = line[..digits].iter().try_fold(0u64, |acc, &b| {
        acc.checked_mul(16)
            .and_then(|v| v.checked_add(u64::from(hex_value(b))))
            .ok_or(ParseError::InvalidChunkSize)
    })?;
    let extensions = &line[digits..];
    if extensions.len() > MAX_CHUNK_EXT_BYTES {
        return Err(ParseError::InvalidChunkExtension);
    }
    check_chunk_extensions(extensions)?;
    Ok(size)
}

fn hex_value(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        b'A'..=b'F' => b - b'A' + 10,
        _ => 0,
    }
}

/// ```text
/// chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
/// chunk-ext-name = token
/// chunk-ext-val  = token / quoted-string
/// ```
/// A digit run followed by anything else (e.g. `1x`, `1 2`) fails here, which is
/// what makes the size itself strict.
fn check_chunk_extensions(mut s: &[u8]) -> Result<(), ParseError> {
    loop {
        s = skip_ows(s);
        let Some(after_semicolon) = s.strip_prefix(b";") else {
            return if s.is_empty() {
                Ok(())
            } else {
                Err(ParseError::InvalidChunkExtension)
            };
        };
        s = skip_ows(after_semicolon);
        let name_len = token_len(s);
        if name_len == 0 {
            return Err(ParseError::InvalidChunkExtension);
        }
        s = &s[name_len..];
        if let Some(after_equals) = skip_ows(s).strip_prefix(b"=") {
            s = skip_ows(after_equals);
            let value_len = if s.first() == Some(&b'"') {
                quoted_string_len(s)?
            } else {
                token_len(s)
            };
            if value_len == 0 {
                return Err(ParseError::InvalidChunkExtension);
            }
            s = &s[value_len..];
        }
    }
}

/// ```text
/// quoted-string  = DQUOTE *( qdtext / quoted-pair ) DQUOTE
/// qdtext         = HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text
/// quoted-pair    = "\" ( HTAB / SP / VCHAR / obs-text )
/// ```
fn quoted_string_len(s: &[u8]) -> Result<usize, ParseError> {
    let mut i = 1;
    loop {
        match s.get(i) {
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => match s.get(i + 1) {
                Some(&b) if is_field_value_byte(b) => i += 2,
                _ => return Err(ParseError::InvalidChunkExtension),
            },
            Some(&b) if is_field_value_byte(b) => i += 1,
            _ => return Err(ParseError::InvalidChunkExtension),
        }
    }
}
