//! Which addresses `fetch` may connect to: every address is classified ([`blocked`]) after the
//! name is resolved, and the connection goes to exactly the addresses that passed.
//!
//! Refused: loopback, private (RFC 1918, IPv6 unique local `fc00::/7`, the old site-local
//! `fec0::/10`), link-local (`169.254/16`, `fe80::/10`), shared (CGNAT, `100.64/10`), the cloud
//! metadata services (`169.254.169.254`, `fd00:ec2::254`, Alibaba's `100.100.100.200`, Azure's
//! `168.63.129.16`), unspecified, multicast, broadcast and the reserved and documentation ranges.
//! An IPv6 address that carries an IPv4 one (mapped `::ffff:a.b.c.d`, compatible `::a.b.c.d`,
//! NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) is judged by the IPv4 address it reaches; Teredo
//! (`2001::/32`) hides it, and is refused. Outside `2000::/3`, no IPv6 address is a public
//! host's. A public address one of this machine's interfaces holds (a server's own address) is
//! this machine too: a service listening on all addresses answers there as on loopback. It is
//! found among the addresses the interfaces hold (`getifaddrs`), and by binding a socket to it,
//! which only a local address allows (this also finds a range routed to the machine itself,
//! unless the kernel is set to bind to any address, where only the interfaces' addresses are
//! known). `[fetch] allow_private` lifts only what [`Blocked::private`] says.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why an address is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    Loopback,
    /// A public address of one of this machine's own interfaces.
    Own,
    /// RFC 1918, IPv6 unique local and site-local.
    Private,
    LinkLocal,
    /// Shared address space (carrier-grade NAT).
    Shared,
    /// A cloud's instance metadata service: never fetched, whatever the settings.
    Metadata,
    Unspecified,
    Multicast,
    Broadcast,
    /// Reserved, documentation, benchmarking or otherwise not a public host's.
    Reserved,
}

impl Blocked {
    /// The words for it: "a loopback address".
    pub fn describe(self) -> &'static str {
        match self {
            Blocked::Loopback => "a loopback address (this machine)",
            Blocked::Own => "an address of this machine",
            Blocked::Private => "a private network address",
            Blocked::LinkLocal => "a link-local address",
            Blocked::Shared => "a shared (carrier-grade NAT) address",
            Blocked::Metadata => "a cloud metadata service's address",
            Blocked::Unspecified => "the unspecified address",
            Blocked::Multicast => "a multicast address",
            Blocked::Broadcast => "the broadcast address",
            Blocked::Reserved => "a reserved address, which no public web server has",
        }
    }

    /// Whether `[fetch] allow_private` lifts it: addresses of the user's machine and networks,
    /// where a page they serve themselves may be. Metadata services and addresses no web
    /// server has stay refused.
    pub fn private(self) -> bool {
        match self {
            Blocked::Loopback | Blocked::Own | Blocked::Private | Blocked::LinkLocal | Blocked::Shared => true,
            Blocked::Metadata | Blocked::Unspecified | Blocked::Multicast | Blocked::Broadcast | Blocked::Reserved => {
                false
            }
        }
    }
}

/// Why `ip` may not be fetched from; `None` for a public address of another machine.
pub fn blocked(ip: IpAddr) -> Option<Blocked> {
    let range = match ip {
        IpAddr::V4(v4) => blocked_v4(v4),
        IpAddr::V6(v6) => blocked_v6(v6),
    };
    // An IPv6 spelling of one of this machine's IPv4 addresses (`::ffff:a.b.c.d`) reaches it
    // as well: the interfaces list the IPv4 one.
    let reached = match ip {
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => reaches(v6).map(IpAddr::V4),
    };
    range.or_else(|| (own(ip) || reached.is_some_and(own)).then_some(Blocked::Own))
}

/// The IPv4 address an IPv6 one carries and reaches: mapped (`::ffff:a.b.c.d`), compatible
/// (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`).
fn reaches(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    let s = ip.segments();
    let embedded = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    match s[0] {
        0 if s[1..6].iter().all(|&x| x == 0) => Some(embedded(s[6], s[7])),
        0x64 if s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0) => Some(embedded(s[6], s[7])),
        0x2002 => Some(embedded(s[1], s[2])),
        _ => None,
    }
}

/// Whether `ip` is an address of this machine.
fn own(ip: IpAddr) -> bool {
    let family = match ip {
        IpAddr::V4(_) => "ipv4",
        IpAddr::V6(_) => "ipv6",
    };
    let any_address = std::fs::read_to_string(format!("/proc/sys/net/{family}/ip_nonlocal_bind"))
        .is_ok_and(|value| value.trim() != "0");
    own_where(ip, any_address)
}

/// Whether `ip` is one of the interfaces' addresses or, unless the kernel lets a socket bind to
/// any address (`any_address`), one a socket can bind to, which only a local address allows.
fn own_where(ip: IpAddr, any_address: bool) -> bool {
    interface_addresses().contains(&ip)
        || (!any_address && std::net::UdpSocket::bind(std::net::SocketAddr::new(ip, 0)).is_ok())
}

/// The addresses this machine's interfaces hold (`getifaddrs(3)`); none where it fails.
#[allow(unsafe_code)]
fn interface_addresses() -> Vec<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs stores a list it allocated in `list`, freed below by freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut next = list;
    while !next.is_null() {
        // SAFETY: `next` is a node of the list getifaddrs made, which is not freed yet.
        let entry = unsafe { &*next };
        if !entry.ifa_addr.is_null() {
            // SAFETY: a non-null `ifa_addr` points to a socket address whose family says which
            // structure it is; each is read only as the one its family names.
            let ip = unsafe {
                match i32::from((*entry.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*entry.ifa_addr.cast::<libc::sockaddr_in>();
                        Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))))
                    }
                    libc::AF_INET6 => {
                        let v6 = &*entry.ifa_addr.cast::<libc::sockaddr_in6>();
                        Some(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)))
                    }
                    _ => None,
                }
            };
            found.extend(ip);
        }
        next = entry.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once, after its last use.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// Metadata services, refused before the ranges they lie in.
const METADATA_V4: [Ipv4Addr; 3] =
    [Ipv4Addr::new(169, 254, 169, 254), Ipv4Addr::new(100, 100, 100, 200), Ipv4Addr::new(168, 63, 129, 16)];
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254);

fn blocked_v4(ip: Ipv4Addr) -> Option<Blocked> {
    let [a, b, c, _] = ip.octets();
    if METADATA_V4.contains(&ip) {
        return Some(Blocked::Metadata);
    }
    let blocked = match (a, b, c) {
        // 0.0.0.0, and "this network": 0.x.y.z reaches this host on some systems.
        (0, _, _) => Blocked::Unspecified,
        (127, _, _) => Blocked::Loopback,
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => Blocked::Private,
        (169, 254, _) => Blocked::LinkLocal,
        (100, 64..=127, _) => Blocked::Shared,
        // IETF protocol assignments, documentation (TEST-NET-1..3), the 6to4 relay anycast,
        // benchmarking.
        (192, 0, 0) | (192, 0, 2) | (198, 51, 100) | (203, 0, 113) | (192, 88, 99) | (198, 18..=19, _) => {
            Blocked::Reserved
        }
        (224..=239, _, _) => Blocked::Multicast,
        _ if ip.is_broadcast() => Blocked::Broadcast,
        (240..=255, _, _) => Blocked::Reserved,
        _ => return None,
    };
    Some(blocked)
}

fn blocked_v6(ip: Ipv6Addr) -> Option<Blocked> {
    if ip == METADATA_V6 {
        return Some(Blocked::Metadata);
    }
    if ip.is_unspecified() {
        return Some(Blocked::Unspecified);
    }
    if ip.is_loopback() {
        return Some(Blocked::Loopback);
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        return blocked_v4(v4);
    }
    let s = ip.segments();
    match (s[0], reaches(ip)) {
        // IPv4-compatible (`::a.b.c.d`, deprecated) and every other address of `::/96`.
        (0, Some(v4)) => Some(blocked_v4(v4).unwrap_or(Blocked::Reserved)),
        // NAT64's well-known prefix reaches the IPv4 address in its last 32 bits; 6to4 the one in
        // bits 16..48.
        (_, Some(v4)) => blocked_v4(v4),
        // Teredo hides the address it reaches; documentation; benchmarking; ORCHID.
        (0x2001, None) if s[1] == 0 || s[1] == 0x0db8 || (s[1] == 2 && s[2] == 0) || (0x10..=0x2f).contains(&s[1]) => {
            Some(Blocked::Reserved)
        }
        (0x2000..=0x3fff, None) => None,
        (0xfc00..=0xfdff, None) => Some(Blocked::Private),
        (0xfe80..=0xfebf, None) => Some(Blocked::LinkLocal),
        (0xfec0..=0xfeff, None) => Some(Blocked::Private),
        (0xff00..=0xffff, None) => Some(Blocked::Multicast),
        // Outside global unicast (`2000::/3`): discard, local-use NAT64, unassigned.
        (_, None) => Some(Blocked::Reserved),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str) -> Option<Blocked> {
        blocked(text.parse().unwrap_or_else(|err| panic!("{text}: {err}")))
    }

    /// The address this machine would send from is its own, whatever its range (a server's
    /// public address answers as loopback does); another machine's is not.
    #[test]
    fn an_address_of_this_machine_is_its_own() {
        assert!(!own("8.8.8.8".parse().unwrap()) && !own("2606:4700:4700::1111".parse().unwrap()));
        assert!(own("127.0.0.1".parse().unwrap()), "loopback is bound like any local address");
        // Connecting a datagram socket sends nothing: it only picks the local address.
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if socket.connect("8.8.8.8:53").is_ok() {
            let local = socket.local_addr().unwrap().ip();
            assert!(own(local), "{local}");
        }
    }

    /// The eighth pass's B9: an IPv6 spelling of this machine's IPv4 address reaches it too.
    #[test]
    fn an_ipv6_spelling_of_an_own_ipv4_address_is_its_own() {
        let local = Ipv4Addr::LOCALHOST;
        assert_eq!(reaches(local.to_ipv6_mapped()), Some(local));
        assert_eq!(reaches("64:ff9b::7f00:1".parse().unwrap()), Some(local));
        assert_eq!(reaches("2002:7f00:1::".parse().unwrap()), Some(local));
        assert_eq!(reaches("2606:4700:4700::1111".parse().unwrap()), None);
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if socket.connect("8.8.8.8:53").is_ok()
            && let IpAddr::V4(own) = socket.local_addr().unwrap().ip()
            && blocked_v4(own).is_none()
        {
            assert_eq!(blocked(IpAddr::V6(own.to_ipv6_mapped())), Some(Blocked::Own), "{own}");
            assert_eq!(
                blocked(IpAddr::V6(Ipv6Addr::from((0x2002u128 << 112) | (u128::from(u32::from(own)) << 80)))),
                Some(Blocked::Own)
            );
        }
    }

    /// Where the kernel lets a socket bind to any address, binding says nothing: the
    /// interfaces' own addresses are still this machine's (the seventh pass's 08).
    #[test]
    fn an_interfaces_address_is_its_own_even_where_any_address_binds() {
        assert!(own_where("127.0.0.1".parse().unwrap(), true));
        assert!(!own_where("8.8.8.8".parse().unwrap(), true));
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if socket.connect("8.8.8.8:53").is_ok() {
            let local = socket.local_addr().unwrap().ip();
            assert!(interface_addresses().contains(&local), "{local}");
            assert!(own_where(local, true), "{local}");
        }
    }

    #[test]
    fn public_addresses_pass() {
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "93.184.215.14",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "192.0.1.1",
            "223.255.255.255",
            "2606:4700:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert_eq!(of(ip), None, "{ip}");
        }
    }

    #[test]
    fn every_spelling_of_this_machine_and_its_networks_is_refused() {
        for (ip, why) in [
            ("127.0.0.1", Blocked::Loopback),
            ("127.255.255.254", Blocked::Loopback),
            ("::1", Blocked::Loopback),
            ("::ffff:127.0.0.1", Blocked::Loopback),
            ("::127.0.0.1", Blocked::Loopback),
            ("64:ff9b::7f00:1", Blocked::Loopback),
            ("2002:7f00:1::", Blocked::Loopback),
            ("0.0.0.0", Blocked::Unspecified),
            ("0.1.2.3", Blocked::Unspecified),
            ("::", Blocked::Unspecified),
            ("::ffff:0.0.0.0", Blocked::Unspecified),
            ("10.0.0.1", Blocked::Private),
            ("172.16.0.1", Blocked::Private),
            ("172.31.255.255", Blocked::Private),
            ("192.168.1.1", Blocked::Private),
            ("::ffff:192.168.1.1", Blocked::Private),
            ("::ffff:10.1.2.3", Blocked::Private),
            ("fc00::1", Blocked::Private),
            ("fd12:3456::1", Blocked::Private),
            ("fec0::1", Blocked::Private),
            ("169.254.1.1", Blocked::LinkLocal),
            ("fe80::1", Blocked::LinkLocal),
            ("::ffff:169.254.1.1", Blocked::LinkLocal),
            ("100.64.0.1", Blocked::Shared),
            ("100.127.255.255", Blocked::Shared),
            ("169.254.169.254", Blocked::Metadata),
            ("::ffff:169.254.169.254", Blocked::Metadata),
            ("::169.254.169.254", Blocked::Metadata),
            ("64:ff9b::a9fe:a9fe", Blocked::Metadata),
            ("2002:a9fe:a9fe::", Blocked::Metadata),
            ("fd00:ec2::254", Blocked::Metadata),
            ("100.100.100.200", Blocked::Metadata),
            ("168.63.129.16", Blocked::Metadata),
            ("224.0.0.1", Blocked::Multicast),
            ("239.255.255.250", Blocked::Multicast),
            ("ff02::1", Blocked::Multicast),
            ("::ffff:224.0.0.1", Blocked::Multicast),
            ("255.255.255.255", Blocked::Broadcast),
            ("240.0.0.1", Blocked::Reserved),
            ("192.0.2.1", Blocked::Reserved),
            ("198.51.100.1", Blocked::Reserved),
            ("203.0.113.1", Blocked::Reserved),
            ("198.18.0.1", Blocked::Reserved),
            ("192.0.0.8", Blocked::Reserved),
            ("2001:db8::1", Blocked::Reserved),
            ("2001::1", Blocked::Reserved),
            ("100::1", Blocked::Reserved),
            ("::1:2:3", Blocked::Reserved),
            ("4000::1", Blocked::Reserved),
        ] {
            assert_eq!(of(ip), Some(why), "{ip}");
        }
    }

    /// What a URL parser makes of the spellings a hostile model tries: each is the address it
    /// reaches, and so refused.
    #[test]
    fn urls_that_spell_loopback_otherwise_reach_a_refused_address() {
        for url in [
            "http://127.0.0.1/",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://127.1/",
            "http://0177.0.0.1/",
            "http://0x7f.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[0:0:0:0:0:ffff:7f00:1]/",
            "http://169.254.169.254/latest/meta-data",
            "http://0251.0376.0251.0376/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://0/",
        ] {
            let parsed = url::Url::parse(url).unwrap();
            let ip: IpAddr = match parsed.host() {
                Some(url::Host::Ipv4(ip)) => ip.into(),
                Some(url::Host::Ipv6(ip)) => ip.into(),
                other => panic!("{url} parses as {other:?}"),
            };
            assert!(blocked(ip).is_some(), "{url} reaches {ip}");
        }
    }

    #[test]
    fn allow_private_lifts_the_users_own_networks_and_nothing_else() {
        assert!(Blocked::Loopback.private() && Blocked::Private.private());
        assert!(Blocked::LinkLocal.private() && Blocked::Shared.private());
        for never in
            [Blocked::Metadata, Blocked::Unspecified, Blocked::Multicast, Blocked::Broadcast, Blocked::Reserved]
        {
            assert!(!never.private(), "{never:?}");
        }
    }
}
