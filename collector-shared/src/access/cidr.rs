//! Address blocks (`10.0.0.0/8`, `fd00::/8`, a single address) as the trusted-proxy setting
//! writes them.

use std::net::IpAddr;

use ipnet::IpNet;

/// An address block (`10.0.0.0/8`, `fd00::/8`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr(IpNet);

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        let net = match s.split_once('/') {
            Some((addr, bits)) => {
                let ip: IpAddr = addr
                    .trim()
                    .parse()
                    .map_err(|_| format!("{s:?} is not an address or CIDR block"))?;
                let max = if ip.is_ipv4() { 32 } else { 128 };
                let bits = bits
                    .trim()
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?;
                IpNet::new(ip, bits).map_err(|e| format!("{s:?}: {e}"))?
            }
            None => IpNet::from(
                s.parse::<IpAddr>()
                    .map_err(|_| format!("{s:?} is not an address or CIDR block"))?,
            ),
        };
        Ok(Cidr(net))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 peer on a dual-stack socket arrives as ::ffff:a.b.c.d.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.0.contains(&ip)
    }
}
