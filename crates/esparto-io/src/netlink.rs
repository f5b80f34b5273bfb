//! A synchronous rtnetlink socket: the daemon's way to ask the kernel about
//! links and to change routes, without running `ip`.
//!
//! Messages are built and parsed by `netlink-packet-route`; the socket is
//! `netlink-sys`'s plain blocking one (no async runtime: the daemon's
//! control thread makes a request and waits for its answer, which the
//! kernel gives at once). Every request carries its own sequence number
//! and only answers with that number are taken, so a late answer to an
//! earlier request can never be mistaken for the current one.
//!
//! The socket belongs to the network namespace of the thread that opened
//! it, for its whole life: open it in the namespace you mean to change.
//! Errors carry the kernel's errno and, where the kernel gives one, its
//! extended-ACK message ("Nexthop device is not up", …).

use std::io;

use netlink_packet_core::{
    NLM_F_ACK, NLM_F_ACK_TLVS, NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload, Nla,
    NlaBuffer, NlasIterator,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::link::{
    AfSpecInet6, AfSpecUnspec, In6AddrGenMode, InfoData, InfoKind, InfoTun, LinkAttribute, LinkInfo, LinkMessage,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

/// Receive buffer: a dump's datagrams are at most a few pages each.
const RECV_BUF_LEN: usize = 64 * 1024;
/// The kernel answers at once; a request unanswered this long fails
/// rather than blocking the daemon's control thread for good.
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// `NLMSGERR_ATTR_MSG` (`<linux/netlink.h>`): the extended-ACK text.
const NLMSGERR_ATTR_MSG: u16 = 1;
/// Length of the `nlmsghdr` the kernel echoes in an error with
/// `NETLINK_CAP_ACK` set (the request's header only, not its body).
const NLMSGHDR_LEN: usize = 16;
/// `IFLA_TUN_NUM_QUEUES` (`<linux/if_link.h>`): queues attached to a TUN device.
const IFLA_TUN_NUM_QUEUES: u16 = 8;

/// A blocking rtnetlink socket in the caller's network namespace.
pub struct Rtnetlink {
    socket: Socket,
    seq: u32,
    buf: Vec<u8>,
}

impl std::fmt::Debug for Rtnetlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rtnetlink").field("seq", &self.seq).finish()
    }
}

/// What the kernel says about one network device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// `IFLA_INFO_KIND` (`"tun"`, `"veth"`, …), if the device has one.
    pub kind: Option<String>,
    /// For a TUN device: how many queues (file descriptors) are attached.
    pub tun_queues: Option<u32>,
    /// Whether the carrier is up (a TUN device has carrier while a queue is
    /// attached).
    pub carrier: Option<bool>,
}

impl Rtnetlink {
    /// Opens a socket in the calling thread's network namespace.
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&SocketAddr::new(0, 0))?;
        // Errors echo only the request's header, plus the kernel's message.
        // Both are best effort: an older kernel still answers with errno.
        let _ = socket.set_cap_ack(true);
        let _ = socket.set_ext_ack(true);
        rustix::net::sockopt::set_socket_timeout(&socket, rustix::net::sockopt::Timeout::Recv, Some(ANSWER_TIMEOUT))?;
        Ok(Self { socket, seq: 0, buf: Vec::with_capacity(RECV_BUF_LEN) })
    }

    /// Turns the kernel's strict checking of requests
    /// (`NETLINK_GET_STRICT_CHK`) on or off: with it, a dump request's
    /// header and attributes filter what the kernel sends back.
    pub(crate) fn set_strict(&mut self, on: bool) -> io::Result<()> {
        self.socket.set_netlink_get_strict_chk(on)
    }

    /// Sends `msg` asking for an acknowledgement, and waits for it.
    pub(crate) fn request(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        let seq = self.send(msg, NLM_F_REQUEST | NLM_F_ACK | flags)?;
        self.collect(seq, |_| {})
    }

    /// Sends a dump request and returns every message of the answer.
    pub(crate) fn dump(&mut self, msg: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self.send(msg, NLM_F_REQUEST | NLM_F_DUMP)?;
        let mut out = Vec::new();
        self.collect(seq, |m| out.push(m))?;
        Ok(out)
    }

    /// Sends a request that the kernel answers with messages (not a dump)
    /// and returns them, once it has acknowledged it.
    pub(crate) fn query(&mut self, msg: RouteNetlinkMessage) -> io::Result<Vec<RouteNetlinkMessage>> {
        let seq = self.send(msg, NLM_F_REQUEST | NLM_F_ACK)?;
        let mut out = Vec::new();
        self.collect(seq, |m| out.push(m))?;
        Ok(out)
    }

    /// The name of every device, by interface index.
    pub fn link_names(&mut self) -> io::Result<std::collections::HashMap<u32, String>> {
        let msgs = self.dump(RouteNetlinkMessage::GetLink(LinkMessage::default()))?;
        let mut out = std::collections::HashMap::new();
        for m in msgs {
            let RouteNetlinkMessage::NewLink(l) = m else { continue };
            for a in &l.attributes {
                if let LinkAttribute::IfName(n) = a {
                    out.insert(l.header.index, n.clone());
                }
            }
        }
        Ok(out)
    }

    /// The name of the device with index `index` (one request, not a
    /// dump); `Ok(None)` if there is none.
    pub fn link_name(&mut self, index: u32) -> io::Result<Option<String>> {
        let mut req = LinkMessage::default();
        req.header.index = index;
        let seq = self.send(RouteNetlinkMessage::GetLink(req), NLM_F_REQUEST | NLM_F_ACK)?;
        let mut found = None;
        match self.collect(seq, |m| {
            if let RouteNetlinkMessage::NewLink(l) = m {
                found = l.attributes.iter().find_map(|a| match a {
                    LinkAttribute::IfName(n) => Some(n.clone()),
                    _ => None,
                });
            }
        }) {
            Ok(()) => Ok(found),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Looks a device up by name; `Ok(None)` if there is none.
    pub fn link(&mut self, name: &str) -> io::Result<Option<Link>> {
        let mut req = LinkMessage::default();
        req.attributes.push(LinkAttribute::IfName(name.to_string()));
        let seq = self.send(RouteNetlinkMessage::GetLink(req), NLM_F_REQUEST | NLM_F_ACK)?;
        let mut found = None;
        match self.collect(seq, |m| {
            if let RouteNetlinkMessage::NewLink(l) = m {
                found = Some(link_of(&l));
            }
        }) {
            Ok(()) => Ok(found),
            Err(e) if errno(&e) == Some(libc::ENODEV) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The index of the device called `name`.
    pub fn link_index(&mut self, name: &str) -> io::Result<u32> {
        match self.link(name)? {
            Some(l) => Ok(l.index),
            None => Err(io::Error::new(io::ErrorKind::NotFound, format!("no network device {name}"))),
        }
    }

    /// Sets the IPv6 address generation mode of device `index` to "none"
    /// (`IFLA_INET6_ADDR_GEN_MODE`, what the sysctl `addr_gen_mode` = 1
    /// sets): the device gets no link-local address when it goes up.
    /// Over netlink, so it works where `/proc/sys` is read-only.
    pub fn no_ipv6_link_local(&mut self, index: u32) -> io::Result<()> {
        let mut req = LinkMessage::default();
        req.header.index = index;
        req.attributes.push(LinkAttribute::AfSpecUnspec(vec![AfSpecUnspec::Inet6(vec![AfSpecInet6::AddrGenMode(
            In6AddrGenMode::None,
        )])]));
        self.request(RouteNetlinkMessage::SetLink(req), 0)
    }

    fn send(&mut self, msg: RouteNetlinkMessage, flags: u16) -> io::Result<u32> {
        self.seq = self.seq.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(msg));
        packet.finalize();
        let mut bytes = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut bytes);
        let sent = self.socket.send(&bytes, 0)?;
        if sent != bytes.len() {
            return Err(io::Error::other(format!("netlink: sent {sent} of {} bytes", bytes.len())));
        }
        Ok(self.seq)
    }

    /// Reads answers to request `seq` until its ACK, its error or the end
    /// of its dump, passing every other message of it to `each`.
    fn collect(&mut self, seq: u32, mut each: impl FnMut(RouteNetlinkMessage)) -> io::Result<()> {
        loop {
            self.buf.clear();
            self.buf.reserve(RECV_BUF_LEN);
            let n = loop {
                // MSG_TRUNC: the full length even if the buffer was too small.
                match self.socket.recv(&mut self.buf, libc::MSG_TRUNC) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        let what = format!("netlink: no answer from the kernel within {ANSWER_TIMEOUT:?}");
                        return Err(io::Error::new(io::ErrorKind::TimedOut, what));
                    }
                    Err(e) => return Err(e),
                }
            };
            if n > self.buf.len() {
                return Err(io::Error::other(format!("netlink: answer of {n} bytes truncated to {}", self.buf.len())));
            }
            let mut off = 0;
            while off < self.buf.len() {
                let rest = &self.buf[off..];
                let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("netlink: {e}")))?;
                let len = msg.header.length as usize;
                if len < NLMSGHDR_LEN || len > rest.len() {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "netlink: bad message length"));
                }
                off += len.next_multiple_of(4);
                if msg.header.sequence_number != seq {
                    continue; // an answer to an earlier, abandoned request
                }
                match msg.payload {
                    NetlinkPayload::Error(e) => {
                        return match e.code {
                            None => Ok(()),
                            Some(code) => Err(kernel_error(code.get(), msg.header.flags, &e.header)),
                        };
                    }
                    NetlinkPayload::Done(_) => return Ok(()),
                    NetlinkPayload::InnerMessage(m) => each(m),
                    _ => {}
                }
            }
        }
    }
}

/// The kernel's refusal of a request: its errno and, where it gave one,
/// its extended-ACK text.
#[derive(Debug)]
pub struct KernelError {
    /// The errno (positive).
    pub errno: i32,
    /// The kernel's explanation, if any.
    pub message: Option<String>,
}

impl std::fmt::Display for KernelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let base = io::Error::from_raw_os_error(self.errno);
        match &self.message {
            Some(m) => write!(f, "{base}: {m}"),
            None => write!(f, "{base}"),
        }
    }
}

impl std::error::Error for KernelError {}

/// The errno of an error from [`Rtnetlink`] (the kernel's refusal or a
/// failed system call), if it has one.
pub fn errno(e: &io::Error) -> Option<i32> {
    e.raw_os_error().or_else(|| e.get_ref()?.downcast_ref::<KernelError>().map(|k| k.errno))
}

/// Turns an `NLMSG_ERROR` into an error carrying its errno and the kernel's
/// extended-ACK message, if it sent one.
fn kernel_error(code: i32, flags: u16, echoed: &[u8]) -> io::Error {
    let errno = code.saturating_abs();
    let mut message = None;
    if flags & NLM_F_ACK_TLVS != 0 && echoed.len() >= NLMSGHDR_LEN {
        for nla in NlasIterator::new(&echoed[NLMSGHDR_LEN..]).flatten() {
            let nla: NlaBuffer<&[u8]> = nla;
            if nla.kind() == NLMSGERR_ATTR_MSG {
                let text = String::from_utf8_lossy(nla.value());
                let text = text.trim_end_matches('\0').trim();
                if !text.is_empty() {
                    message = Some(text.to_string());
                }
            }
        }
    }
    io::Error::new(io::Error::from_raw_os_error(errno).kind(), KernelError { errno, message })
}

fn link_of(l: &LinkMessage) -> Link {
    let mut out = Link { index: l.header.index, kind: None, tun_queues: None, carrier: None };
    for a in &l.attributes {
        match a {
            LinkAttribute::Carrier(c) => out.carrier = Some(*c != 0),
            LinkAttribute::LinkInfo(infos) => {
                for i in infos {
                    match i {
                        LinkInfo::Kind(k) => out.kind = Some(kind_name(k)),
                        LinkInfo::Data(InfoData::Tun(nlas)) => {
                            for n in nlas {
                                let InfoTun::Other(d) = n else { continue };
                                if d.kind() == IFLA_TUN_NUM_QUEUES && d.value_len() == 4 {
                                    let mut v = [0u8; 4];
                                    d.emit_value(&mut v);
                                    out.tun_queues = Some(u32::from_ne_bytes(v));
                                }
                            }
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Tun => "tun".into(),
        InfoKind::Other(s) => s.clone(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// `RTNLGRP_IPV4_IFADDR`, `RTNLGRP_IPV6_IFADDR` (`<linux/rtnetlink.h>`).
const ADDRESS_GROUPS: [u32; 2] = [5, 9];

/// The address an `RTM_NEWADDR`/`RTM_DELADDR` is about: `IFA_LOCAL` (an
/// IPv4 point-to-point link's `IFA_ADDRESS` is its peer's), else
/// `IFA_ADDRESS`.
fn address_of(m: &netlink_packet_route::address::AddressMessage) -> Option<std::net::IpAddr> {
    use netlink_packet_route::address::AddressAttribute as A;
    let local = m.attributes.iter().find_map(|a| if let A::Local(ip) = a { Some(*ip) } else { None });
    local.or_else(|| m.attributes.iter().find_map(|a| if let A::Address(ip) = a { Some(*ip) } else { None }))
}

impl Rtnetlink {
    /// Every address of the host, both families (`ip address`).
    pub fn addresses(&mut self) -> io::Result<Vec<std::net::IpAddr>> {
        let msgs = self.dump(RouteNetlinkMessage::GetAddress(Default::default()))?;
        Ok(msgs
            .iter()
            .filter_map(|m| match m {
                RouteNetlinkMessage::NewAddress(a) => address_of(a),
                _ => None,
            })
            .collect())
    }
}

/// An address of the host that came or went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressChange {
    /// Added (`RTM_NEWADDR`; also sent when an address changes).
    Added(std::net::IpAddr),
    /// Removed (`RTM_DELADDR`).
    Removed(std::net::IpAddr),
    /// Events were lost (the socket's buffer overflowed): ask
    /// [`Rtnetlink::addresses`] what is there now.
    Lost,
}

/// The host's addresses coming and going, as the kernel announces them:
/// a netlink socket subscribed to the address groups of both families,
/// read without blocking (poll its descriptor). In the network namespace
/// of the thread that opened it.
pub struct AddressWatch {
    socket: Socket,
    buf: Vec<u8>,
}

impl std::fmt::Debug for AddressWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressWatch").finish_non_exhaustive()
    }
}

impl std::os::fd::AsFd for AddressWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl AddressWatch {
    /// Subscribes in the calling thread's network namespace.
    pub fn open() -> io::Result<Self> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        for g in ADDRESS_GROUPS {
            socket.add_membership(g)?;
        }
        socket.set_non_blocking(true)?;
        Ok(Self { socket, buf: Vec::with_capacity(RECV_BUF_LEN) })
    }

    /// Everything announced since the last call, in order (empty if
    /// nothing was).
    pub fn changes(&mut self) -> io::Result<Vec<AddressChange>> {
        let mut out = Vec::new();
        loop {
            self.buf.clear();
            self.buf.reserve(RECV_BUF_LEN);
            match self.socket.recv(&mut self.buf, 0) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(out),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    out.push(AddressChange::Lost);
                    continue;
                }
                Err(e) => return Err(e),
            }
            let mut off = 0;
            while off < self.buf.len() {
                let rest = &self.buf[off..];
                let Ok(msg) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(rest) else {
                    break;
                };
                let len = msg.header.length as usize;
                if len < NLMSGHDR_LEN || len > rest.len() {
                    break;
                }
                off += len.next_multiple_of(4);
                match msg.payload {
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
                        out.extend(address_of(&a).map(AddressChange::Added));
                    }
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(a)) => {
                        out.extend(address_of(&a).map(AddressChange::Removed));
                    }
                    _ => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use esparto_netns::{self as netns, Netns};

    #[test]
    fn loopback_is_found_and_a_missing_device_is_none() {
        if !netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = Netns::new("nl").unwrap();
        let (lo, missing) = ns
            .run(|| {
                let mut nl = Rtnetlink::open().unwrap();
                (nl.link("lo").unwrap(), nl.link("esp-none0").unwrap())
            })
            .unwrap();
        let lo = lo.unwrap();
        assert_eq!(lo.index, 1, "{lo:?}");
        assert_eq!(lo.tun_queues, None);
        assert!(missing.is_none());
    }

    #[test]
    fn a_device_set_to_no_link_local_comes_up_without_one() {
        if !netns::available() {
            eprintln!("SKIP: needs root and iproute2");
            return;
        }
        let ns = Netns::new("nl6").unwrap();
        ns.ip(&["link", "add", "d0", "type", "veth", "peer", "name", "d1"]).unwrap();
        ns.run(|| {
            let mut nl = Rtnetlink::open().unwrap();
            let index = nl.link_index("d0").unwrap();
            nl.no_ipv6_link_local(index).unwrap();
        })
        .unwrap();
        ns.ip(&["link", "set", "d0", "up"]).unwrap();
        ns.ip(&["link", "set", "d1", "up"]).unwrap();
        let addrs = |dev: &str| {
            let o = ns.ip(&["-6", "addr", "show", "dev", dev]).unwrap();
            String::from_utf8_lossy(&o.stdout).to_string()
        };
        // The untouched end gets one once the kernel sees the carrier (an
        // asynchronous event); by then the other end would have one too.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !addrs("d1").contains("fe80::") {
            assert!(std::time::Instant::now() < deadline, "d1 never got a link-local address: {}", addrs("d1"));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!addrs("d0").contains("fe80::"), "{}", addrs("d0"));
        let mode = ns.exec("cat", &["/proc/sys/net/ipv6/conf/d0/addr_gen_mode"]).unwrap();
        assert_eq!(String::from_utf8_lossy(&mode.stdout).trim(), "1");
    }
}
