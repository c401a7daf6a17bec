//! [`closed_set!`](macro@crate::closed_set): a closed set of names — an enum whose every
//! member carries its wire name — declared once. `ALL`, `as_str`, `parse`, `Display` and the serde names
//! follow from the one list, so a member cannot be added and left out of parsing, of `ALL` (and
//! what reads it: filters, default alert rules, the OpenAPI enums) or of the wire.

/// Declares an enum of named members:
///
/// ```ignore
/// model::closed_set! {
///     /// How severe a finding is.
///     #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
///     pub enum Severity {
///         Info = "info",
///         Warning = "warning",
///         Critical = "critical",
///     }
/// }
/// ```
///
/// gives the enum (each member serialized under its name; the enum must derive serde's
/// traits), `Severity::ALL` (every member in declaration order, counted by the compiler),
/// `as_str` and `parse` (`None` for any other text).
#[macro_export]
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$member_meta:meta])*
                $member:ident = $wire:literal,
            )+
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$member_meta])* #[serde(rename = $wire)] $member, )+
        }

        impl $name {
            /// Every member, in declaration order.
            pub const ALL: [$name; $crate::closed_set!(@count $($member)+)] = [$($name::$member),+];

            /// Its name, as the wire, the API and the configuration spell it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$member => $wire, )+
                }
            }

            /// The member named `s`; `None` for any other text.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $( $wire => Some($name::$member), )+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            /// Its name ([`Self::as_str`]).
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@count) => { 0usize };
    (@count $head:ident $($tail:ident)*) => { 1usize + $crate::closed_set!(@count $($tail)*) };
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};

    crate::closed_set! {
        /// Three members, one with a name unlike its identifier.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
        enum Example {
            First = "first",
            /// The second.
            SecondOne = "second_one",
            Third = "3rd",
        }
    }

    #[test]
    fn every_member_is_listed_named_parsed_and_serialized_alike() {
        assert_eq!(Example::ALL.len(), 3);
        for m in Example::ALL {
            assert_eq!(Example::parse(m.as_str()), Some(m));
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
            assert_eq!(serde_json::from_str::<Example>(&json).unwrap(), m);
        }
        assert_eq!(Example::ALL[2].as_str(), "3rd");
        assert_eq!(Example::parse("Third"), None);
        assert!(serde_json::from_str::<Example>("\"fourth\"").is_err());
    }
}
