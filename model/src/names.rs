//! Names that end up in URLs, Kubernetes API paths, field selectors and labels: cluster and node
//! names are DNS-1123 subdomains, as Kubernetes requires of node names (lower-case letters,
//! digits, `-` and `.`; dot-separated labels of 1 to 63 characters that start and end with a
//! letter or digit; 253 characters at most). Such a name needs no escaping anywhere: it cannot
//! carry `?`, `/`, `,`, `=`, whitespace or a control character into a path or a selector.

/// The DRA driver of NVIDIA GPUs (k8s-dra-driver-gpu): the `driver` of its ResourceSlices and
/// of claim results it allocated.
pub const NVIDIA_DRA_DRIVER: &str = "gpu.nvidia.com";

/// The Node annotation in which HAMi's device plugin registers the GPUs it serves there (each
/// by UUID; `:`-separated lists of `,`-separated fields up to HAMi 2.4, JSON after).
pub const HAMI_NODE_REGISTER: &str = "hami.io/node-nvidia-register";

/// An account or user name as Slurm allows them in practice: 1–64 of letters, digits, `._@-`.
/// Such a name carries no whitespace, separator or control character.
pub fn is_slurm_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= 64
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._@-".contains(&b))
}

/// The longest head of `text` that fits `max` bytes, cut at a character boundary.
pub fn head(text: &str, max: usize) -> &str {
    let mut cut = text.len().min(max);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// The longest DNS-1123 subdomain.
pub const MAX_SUBDOMAIN_LEN: usize = 253;

/// Why a name is not a DNS-1123 subdomain, for an error message that names the field.
pub fn check_subdomain(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > MAX_SUBDOMAIN_LEN {
        return Err(format!(
            "is {} characters long; a DNS-1123 subdomain has at most {MAX_SUBDOMAIN_LEN}",
            value.len()
        ));
    }
    for label in value.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(format!(
                "{value:?} is not a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', each part starting and ending with a letter or digit), as Kubernetes requires of node names"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_dns_subdomains() {
        for good in ["gpu-h100-01", "n1", "a.b-c.example", "0"] {
            check_subdomain(good).unwrap();
        }
        for bad in [
            "",
            "gpu-a?x=1",
            "gpu-a/../b",
            "GPU-A",
            "-a",
            "a-",
            "a..b",
            "a b",
            "a,b",
            "a\u{0}b",
            "ñode",
        ] {
            assert!(check_subdomain(bad).is_err(), "{bad:?}");
        }
        assert!(check_subdomain(&"a".repeat(254)).is_err());
        assert!(check_subdomain(&vec!["a".repeat(63); 3].join(".")).is_ok());
        assert!(check_subdomain(&"a".repeat(64)).is_err());
    }
}
