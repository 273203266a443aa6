//! Property tests: the direct byte paths of the serde bridge (`to_canonical_bytes`,
//! `from_canonical_bytes`) agree with the value paths (`encode(&to_value(..))`,
//! `from_value(decode(..))`) on every input, results and errors alike, including hostile
//! bytes.

// Strategy helpers sit outside `#[test]` functions, where clippy's test exemption ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use rho_ipc::canonical::{
    CanonicalError, decode, encode, from_canonical_bytes, from_value, to_canonical_bytes, to_value,
};
use rho_ipc::data::Data;
use rho_ipc::program::Condition;

fn data() -> impl Strategy<Value = Data> {
    let leaf = prop_oneof![
        Just(Data::Null),
        any::<bool>().prop_map(Data::Bool),
        any::<i64>().prop_map(Data::Int),
        prop_oneof![-30_i64..30, Just(i64::MIN), Just(i64::MAX)].prop_map(Data::Int),
        "[a-d]{0,3}".prop_map(Data::String),
        ".{0,30}".prop_map(Data::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Data::List),
            prop::collection::btree_map("[a-c]{0,3}|.{0,25}", inner, 0..6).prop_map(Data::Map),
        ]
    })
}

fn read_both<T: serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
) -> (Result<T, CanonicalError>, Result<T, CanonicalError>) {
    (
        from_canonical_bytes(bytes),
        decode(bytes).and_then(from_value),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn writing_data_matches_the_value_path(d in data(), extra in data()) {
        prop_assert_eq!(to_canonical_bytes(&d), to_value(&d).and_then(|v| encode(&v)));
        let nested = (vec![d.clone(), extra.clone()], Some(BTreeMap::from([(1_u8, extra)])));
        prop_assert_eq!(
            to_canonical_bytes(&nested),
            to_value(&nested).and_then(|v| encode(&v))
        );
    }

    #[test]
    fn reading_data_matches_the_value_path(d in data()) {
        let bytes = to_canonical_bytes(&d).unwrap();
        let (direct, two_step) = read_both::<Data>(&bytes);
        prop_assert_eq!(&direct, &two_step);
        prop_assert_eq!(direct.unwrap(), d);
        let (direct, two_step) = read_both::<Vec<String>>(&bytes);
        prop_assert_eq!(direct, two_step);
        let (direct, two_step) = read_both::<BTreeMap<String, i32>>(&bytes);
        prop_assert_eq!(direct, two_step);
        let (direct, two_step) = read_both::<Condition>(&bytes);
        prop_assert_eq!(direct, two_step);
    }

    #[test]
    fn hostile_bytes_get_the_same_answer_on_both_paths(
        d in data(),
        position in any::<prop::sample::Index>(),
        replacement in any::<u8>(),
        cut in any::<prop::sample::Index>(),
        noise in prop::collection::vec(any::<u8>(), 0..48),
    ) {
        let mut bytes = to_canonical_bytes(&d).unwrap();
        let at = position.index(bytes.len());
        bytes[at] = replacement;
        let keep = cut.index(bytes.len() + 1);
        for candidate in [&bytes[..], &bytes[..keep], &noise[..]] {
            let (direct, two_step) = read_both::<Data>(candidate);
            prop_assert_eq!(direct, two_step);
            let (direct, two_step) = read_both::<(Option<String>, u8)>(candidate);
            prop_assert_eq!(direct, two_step);
        }
    }
}
