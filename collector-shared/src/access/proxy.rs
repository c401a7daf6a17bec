//! The trusted reverse proxy: who a request comes from, read from the proxy's headers, but only
//! when the connection itself comes from one of the proxy's addresses.

use std::net::IpAddr;

use axum::http::HeaderMap;

use super::cidr::Cidr;

/// The proxy settings, parsed.
#[derive(Debug, Clone)]
pub struct Trusted {
    blocks: Vec<Cidr>,
    user_header: String,
    groups_header: Option<String>,
}

/// Headers longer than this are refused rather than read (a user name, a group list).
const MAX_HEADER: usize = 8 * 1024;

impl Trusted {
    pub fn new(s: &super::settings::Proxy) -> Result<Trusted, String> {
        Ok(Trusted {
            blocks: s
                .trusted
                .iter()
                .map(|t| Cidr::parse(t))
                .collect::<Result<_, _>>()?,
            user_header: s.user_header.to_ascii_lowercase(),
            groups_header: s.groups_header.as_ref().map(|h| h.to_ascii_lowercase()),
        })
    }

    pub fn trusts(&self, peer: IpAddr) -> bool {
        self.blocks.iter().any(|b| b.contains(peer))
    }

    /// The user and groups the proxy names, when `peer` is the proxy and it names a user.
    pub fn identity(
        &self,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Option<(String, Vec<String>)> {
        if !peer.is_some_and(|p| self.trusts(p)) {
            return None;
        }
        let user = header(headers, &self.user_header)?;
        if user.is_empty() {
            return None;
        }
        let groups = self
            .groups_header
            .as_deref()
            .and_then(|h| header(headers, h))
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        Some((user.to_owned(), groups))
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let v = headers.get(name)?.to_str().ok()?.trim();
    (v.len() <= MAX_HEADER).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_match_by_prefix() {
        let b = Cidr::parse("10.1.0.0/16").unwrap();
        assert!(b.contains("10.1.255.3".parse().unwrap()));
        assert!(!b.contains("10.2.0.1".parse().unwrap()));
        assert!(b.contains("::ffff:10.1.0.9".parse().unwrap()), "v4-mapped");
        let one = Cidr::parse("192.0.2.7").unwrap();
        assert!(one.contains("192.0.2.7".parse().unwrap()));
        assert!(!one.contains("192.0.2.8".parse().unwrap()));
        let odd = Cidr::parse("192.0.2.128/25").unwrap();
        assert!(odd.contains("192.0.2.200".parse().unwrap()));
        assert!(!odd.contains("192.0.2.127".parse().unwrap()));
        assert!(
            Cidr::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert!(
            Cidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("proxy.local").is_err());
    }

    #[test]
    fn headers_count_only_from_the_proxy() {
        let t = Trusted::new(&crate::access::settings::Proxy {
            trusted: vec!["10.0.0.5".into()],
            user_header: "X-Forwarded-User".into(),
            groups_header: Some("X-Forwarded-Groups".into()),
        })
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-user", "alice".parse().unwrap());
        h.insert(
            "x-forwarded-groups",
            "gpu-ops, team-search,".parse().unwrap(),
        );
        assert_eq!(
            t.identity(&h, Some("10.0.0.5".parse().unwrap())),
            Some(("alice".into(), vec!["gpu-ops".into(), "team-search".into()]))
        );
        assert_eq!(t.identity(&h, Some("10.0.0.6".parse().unwrap())), None);
        assert_eq!(t.identity(&h, None), None);
        h.insert("x-forwarded-user", "".parse().unwrap());
        assert_eq!(t.identity(&h, Some("10.0.0.5".parse().unwrap())), None);
    }
}
