//! Enums whose values are names: a step, a backend, an actor. One macro writes what each needs —
//! the name of each value, `Display`, `FromStr` with an error listing the known names, and serde
//! as the name itself (so on the wire and in the store such a value is exactly the string it was
//! before it was typed, and an unknown name is refused where it is read).

/// A name this build does not know, for a kind of name (`step`, `backend`, `actor`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{name}` (known: {known})")]
pub struct UnknownName {
    pub what: &'static str,
    pub name: String,
    pub known: String,
}

/// `named_enum! { /// doc … pub enum T("what") { /// doc … A => "a", … } }`
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $T:ident($what:literal) {
            $( $(#[$vmeta:meta])* $V:ident => $name:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(try_from = "String", into = "String")]
        pub enum $T {
            $( $(#[$vmeta])* $V, )+
        }

        impl $T {
            /// Every value, in declaration order.
            pub const ALL: &'static [$T] = &[$($T::$V),+];

            /// The value's name, on the wire, in the store and on command lines.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $T::$V => $name, )+
                }
            }
        }

        impl std::fmt::Display for $T {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $T {
            type Err = $crate::names::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $T::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| $crate::names::UnknownName {
                        what: $what,
                        name: s.to_string(),
                        known: $T::ALL
                            .iter()
                            .map(|v| v.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                    })
            }
        }

        impl TryFrom<String> for $T {
            type Error = $crate::names::UnknownName;

            fn try_from(s: String) -> Result<Self, Self::Error> {
                s.parse()
            }
        }

        impl From<$T> for String {
            fn from(v: $T) -> String {
                v.as_str().to_string()
            }
        }
    };
}

pub(crate) use named_enum;
