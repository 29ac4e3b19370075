//! A small NBD client, written from the protocol document (`doc/proto.md` of the NBD project):
//! the fixed newstyle handshake, `NBD_OPT_GO` (falling back to `NBD_OPT_EXPORT_NAME`), and the
//! transmission commands `NBD_CMD_READ`, `NBD_CMD_WRITE` and `NBD_CMD_DISC`, with simple
//! replies only (structured replies are never asked for).
//!
//! It works over anything `Read + Write` — a [`UnixStream`](std::os::unix::net::UnixStream), or
//! `&UnixStream` borrowed from a `ChildHandle`. Requests can be *sent* without waiting for their
//! reply ([`Nbd::send_read`]), to have a request in flight when the connection is closed.

use std::collections::HashMap;
use std::io::{self, Read, Write};

/// `NBDMAGIC`, the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: newstyle server greeting, and the prefix of every option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1;
pub const FLAG_NO_ZEROES: u16 = 2;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1;
pub const FLAG_C_NO_ZEROES: u32 = 2;

/// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_GO: u32 = 7;

/// Option reply types (errors have bit 31 set).
pub const REP_ACK: u32 = 1;
pub const REP_INFO: u32 = 3;
pub const REP_FLAG_ERROR: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_FLAG_ERROR | 1;

/// `NBD_INFO_EXPORT`: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;

/// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1;
pub const TFLAG_READ_ONLY: u16 = 2;

/// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;

/// A connected client in the transmission phase.
#[derive(Debug)]
pub struct Nbd<S> {
    stream: S,
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags (`TFLAG_*`).
    pub transmission_flags: u16,
    /// Which option ended the handshake (`OPT_GO` or `OPT_EXPORT_NAME`).
    pub negotiated_with: u32,
    next_cookie: u64,
    /// Cookie → (command, length) of requests sent and not yet answered.
    in_flight: HashMap<u64, (u16, u32)>,
}

fn read_u16(r: &mut impl Read) -> io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

fn read_u32(r: &mut impl Read) -> io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

fn read_vec(r: &mut impl Read, len: usize) -> io::Result<Vec<u8>> {
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn protocol(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

impl<S: Read + Write> Nbd<S> {
    /// The fixed newstyle handshake for export `name` (`""`: the default export). Tries
    /// `NBD_OPT_GO`; if the server does not support it, `NBD_OPT_EXPORT_NAME`.
    pub fn handshake(mut stream: S, name: &str) -> io::Result<Nbd<S>> {
        let magic = read_u64(&mut stream)?;
        if magic != NBDMAGIC {
            return Err(protocol(format!("bad NBDMAGIC {magic:#x}")));
        }
        let style = read_u64(&mut stream)?;
        if style != IHAVEOPT {
            return Err(protocol(format!(
                "not a newstyle server (got {style:#x}; oldstyle is not supported)"
            )));
        }
        let server_flags = read_u16(&mut stream)?;
        if server_flags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(protocol("server is not fixed-newstyle"));
        }
        let no_zeroes = server_flags & FLAG_NO_ZEROES != 0;
        let client_flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        stream.write_all(&client_flags.to_be_bytes())?;

        let mut nbd = Nbd {
            stream,
            size: 0,
            transmission_flags: 0,
            negotiated_with: OPT_GO,
            next_cookie: 1,
            in_flight: HashMap::new(),
        };
        if nbd.opt_go(name)? {
            return Ok(nbd);
        }
        nbd.opt_export_name(name, no_zeroes)?;
        nbd.negotiated_with = OPT_EXPORT_NAME;
        Ok(nbd)
    }

    fn send_option(&mut self, option: u32, data: &[u8]) -> io::Result<()> {
        let mut msg = Vec::with_capacity(16 + data.len());
        msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
        msg.extend_from_slice(&option.to_be_bytes());
        msg.extend_from_slice(&(data.len() as u32).to_be_bytes());
        msg.extend_from_slice(data);
        self.stream.write_all(&msg)
    }

    /// `NBD_OPT_GO`. `Ok(false)`: the server does not know it (fall back).
    fn opt_go(&mut self, name: &str) -> io::Result<bool> {
        let mut data = Vec::new();
        data.extend_from_slice(&(name.len() as u32).to_be_bytes());
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&0u16.to_be_bytes()); // no extra info requests
        self.send_option(OPT_GO, &data)?;
        let mut got_export = false;
        loop {
            let magic = read_u64(&mut self.stream)?;
            if magic != OPT_REPLY_MAGIC {
                return Err(protocol(format!("bad option reply magic {magic:#x}")));
            }
            let option = read_u32(&mut self.stream)?;
            let kind = read_u32(&mut self.stream)?;
            let len = read_u32(&mut self.stream)? as usize;
            let payload = read_vec(&mut self.stream, len)?;
            if option != OPT_GO {
                return Err(protocol(format!("reply to option {option}, expected GO")));
            }
            match kind {
                REP_INFO
                    if payload.len() >= 12
                        && u16::from_be_bytes([payload[0], payload[1]]) == INFO_EXPORT =>
                {
                    self.size = u64::from_be_bytes(payload[2..10].try_into().unwrap());
                    self.transmission_flags = u16::from_be_bytes([payload[10], payload[11]]);
                    got_export = true;
                }
                REP_ACK => {
                    if !got_export {
                        return Err(protocol("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT"));
                    }
                    return Ok(true);
                }
                REP_ERR_UNSUP => return Ok(false),
                k if k & REP_FLAG_ERROR != 0 => {
                    return Err(io::Error::other(format!(
                        "NBD_OPT_GO refused: error {:#x} {}",
                        k,
                        String::from_utf8_lossy(&payload)
                    )))
                }
                // Other replies may be ignored by a client that did not ask for them.
                _ => {}
            }
        }
    }

    /// `NBD_OPT_EXPORT_NAME`: the old way in; the server answers with size and flags directly.
    fn opt_export_name(&mut self, name: &str, no_zeroes: bool) -> io::Result<()> {
        self.send_option(OPT_EXPORT_NAME, name.as_bytes())?;
        self.size = read_u64(&mut self.stream)?;
        self.transmission_flags = read_u16(&mut self.stream)?;
        if !no_zeroes {
            read_vec(&mut self.stream, 124)?;
        }
        Ok(())
    }

    fn send_request(
        &mut self,
        command: u16,
        offset: u64,
        len: u32,
        data: &[u8],
    ) -> io::Result<u64> {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let mut msg = Vec::with_capacity(28 + data.len());
        msg.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        msg.extend_from_slice(&0u16.to_be_bytes()); // command flags
        msg.extend_from_slice(&command.to_be_bytes());
        msg.extend_from_slice(&cookie.to_be_bytes());
        msg.extend_from_slice(&offset.to_be_bytes());
        msg.extend_from_slice(&len.to_be_bytes());
        msg.extend_from_slice(data);
        self.stream.write_all(&msg)?;
        if command != CMD_DISC {
            self.in_flight.insert(cookie, (command, len));
        }
        Ok(cookie)
    }

    /// Sends `NBD_CMD_READ` and returns its cookie without waiting for the reply.
    pub fn send_read(&mut self, offset: u64, len: u32) -> io::Result<u64> {
        self.send_request(CMD_READ, offset, len, &[])
    }

    /// Sends `NBD_CMD_WRITE` with `data` and returns its cookie without waiting for the reply.
    pub fn send_write(&mut self, offset: u64, data: &[u8]) -> io::Result<u64> {
        self.send_request(CMD_WRITE, offset, data.len() as u32, data)
    }

    /// Receives one simple reply: its cookie and, for a read, the data. An error reply becomes
    /// an `io::Error` naming the NBD error number.
    pub fn recv_reply(&mut self) -> io::Result<(u64, Vec<u8>)> {
        let magic = read_u32(&mut self.stream)?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(protocol(format!("bad reply magic {magic:#x}")));
        }
        let error = read_u32(&mut self.stream)?;
        let cookie = read_u64(&mut self.stream)?;
        let (command, len) = self
            .in_flight
            .remove(&cookie)
            .ok_or_else(|| protocol(format!("reply for unknown cookie {cookie}")))?;
        if error != 0 {
            return Err(io::Error::other(format!(
                "NBD command {command} failed with error {error}"
            )));
        }
        let data = if command == CMD_READ {
            read_vec(&mut self.stream, len as usize)?
        } else {
            Vec::new()
        };
        Ok((cookie, data))
    }

    /// Reads `len` bytes at `offset` and waits for them.
    pub fn read(&mut self, offset: u64, len: u32) -> io::Result<Vec<u8>> {
        let cookie = self.send_read(offset, len)?;
        let (got, data) = self.recv_reply()?;
        if got != cookie {
            return Err(protocol(format!("reply for {got}, expected {cookie}")));
        }
        Ok(data)
    }

    /// Writes `data` at `offset` and waits for the acknowledgement.
    pub fn write(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let cookie = self.send_write(offset, data)?;
        let (got, _) = self.recv_reply()?;
        if got != cookie {
            return Err(protocol(format!("reply for {got}, expected {cookie}")));
        }
        Ok(())
    }

    /// Sends `NBD_CMD_DISC` (no reply comes; the server closes once in-flight requests are done).
    pub fn disconnect(&mut self) -> io::Result<()> {
        self.send_request(CMD_DISC, 0, 0, &[]).map(drop)
    }

    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether the export is read-only.
    pub fn is_read_only(&self) -> bool {
        self.transmission_flags & TFLAG_READ_ONLY != 0
    }

    /// The stream underneath.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// Gives the stream back.
    pub fn into_inner(self) -> S {
        self.stream
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    /// A stream reading from a canned server script and recording what the client writes.
    struct Script {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Read for Script {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Script {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn opt_reply(out: &mut Vec<u8>, option: u32, kind: u32, data: &[u8]) {
        out.extend_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
        out.extend_from_slice(&option.to_be_bytes());
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(data);
    }

    fn greeting() -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(&NBDMAGIC.to_be_bytes());
        s.extend_from_slice(&IHAVEOPT.to_be_bytes());
        s.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
        s
    }

    #[test]
    fn go_then_read() {
        let mut s = greeting();
        let mut info = INFO_EXPORT.to_be_bytes().to_vec();
        info.extend_from_slice(&512u64.to_be_bytes());
        info.extend_from_slice(&(TFLAG_HAS_FLAGS | TFLAG_READ_ONLY).to_be_bytes());
        opt_reply(&mut s, OPT_GO, REP_INFO, &info);
        opt_reply(&mut s, OPT_GO, REP_ACK, &[]);
        s.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
        s.extend_from_slice(&0u32.to_be_bytes());
        s.extend_from_slice(&1u64.to_be_bytes());
        s.extend_from_slice(&[7u8; 4]);
        let stream = Script {
            input: Cursor::new(s),
            output: Vec::new(),
        };
        let mut nbd = Nbd::handshake(stream, "").unwrap();
        assert_eq!(nbd.size, 512);
        assert!(nbd.is_read_only());
        assert_eq!(nbd.read(0, 4).unwrap(), vec![7u8; 4]);
        let out = &nbd.get_ref().output;
        // client flags, then IHAVEOPT + GO.
        assert_eq!(&out[..4], &3u32.to_be_bytes());
        assert_eq!(&out[4..12], &IHAVEOPT.to_be_bytes());
        assert_eq!(&out[12..16], &OPT_GO.to_be_bytes());
    }

    #[test]
    fn falls_back_to_export_name() {
        let mut s = greeting();
        opt_reply(&mut s, OPT_GO, REP_ERR_UNSUP, &[]);
        s.extend_from_slice(&1024u64.to_be_bytes());
        s.extend_from_slice(&TFLAG_HAS_FLAGS.to_be_bytes());
        let stream = Script {
            input: Cursor::new(s),
            output: Vec::new(),
        };
        let nbd = Nbd::handshake(stream, "x").unwrap();
        assert_eq!(nbd.size, 1024);
        assert_eq!(nbd.negotiated_with, OPT_EXPORT_NAME);
    }
}
