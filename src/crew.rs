//! The crew of an event, by the contract's rules, from its canonical payload: pure
//! functions with no I/O, which both backends call when they keep the crew rows of
//! a batch's flights and duties (and the migrations that build them), so that there
//! is one reading of the rules.
//!
//! The payload's `crew` member, when it is an array; each element a string (a crew
//! id, operating crew) or an object with a string `id` and an optional `role`,
//! `"operating"` (the default) or `"positioning"`; other members of an object are
//! ignored. An id is trimmed of Unicode whitespace (as the event's own fields are)
//! and must then be 1–64 characters from `!` to `~`. Anything else (an element of
//! another shape, an unknown or non-string `role`, `"role": null` included, a
//! `crew` that is not an array, a payload that does not parse) gives no crew
//! member, and the event stays valid. An id listed twice counts once, operating if
//! either listing is.

use std::collections::BTreeMap;

use crate::batch::json::{self, Value};

/// How deep a stored payload may nest: the event's own limit (128 levels, the
/// event object included) leaves its payload one level fewer; a little more costs
/// nothing and never refuses a payload that was stored.
const PAYLOAD_DEPTH_MAX: usize = 256;

/// The longest crew id, in characters (all ASCII, so bytes too).
pub const CREW_ID_CHARS_MAX: usize = 64;

/// What a crew member did on a flight or duty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Crew operating the flight: block time counts as flight time and duty.
    Operating,
    /// Crew carried as passengers to position: duty, not flight time.
    Positioning,
}

impl Role {
    /// The text the views show: `operating` or `positioning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operating => "operating",
            Role::Positioning => "positioning",
        }
    }

    /// The role a `role` member names, when it names one.
    fn parse(text: &str) -> Option<Role> {
        match text {
            "operating" => Some(Role::Operating),
            "positioning" => Some(Role::Positioning),
            _ => None,
        }
    }
}

/// One crew member of an event: a checked id and a role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    id: String,
    role: Role,
}

impl Member {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn role(&self) -> Role {
        self.role
    }
}

/// The crew of an event given its canonical payload text, ordered by id. A payload
/// that does not parse (none that spoolite stores) gives none.
pub fn of_payload(payload: &str) -> Vec<Member> {
    match json::parse(payload, PAYLOAD_DEPTH_MAX) {
        Ok(parsed) => of_value(&parsed.value),
        Err(_) => Vec::new(),
    }
}

/// The crew of an event given its payload as a value, ordered by id.
pub(crate) fn of_value(payload: &Value) -> Vec<Member> {
    let Value::Object(members) = payload else {
        return Vec::new();
    };
    // A stored payload has no duplicate keys (they make the event invalid), so
    // the first `crew` is the only one.
    let Some((_, Value::Array(elements))) = members.iter().find(|(name, _)| name == "crew") else {
        return Vec::new();
    };
    let mut crew: BTreeMap<&str, Role> = BTreeMap::new();
    for (id, role) in elements.iter().filter_map(element) {
        crew.entry(id)
            .and_modify(|held| *held = (*held).min(role))
            .or_insert(role);
    }
    crew.into_iter()
        .map(|(id, role)| Member {
            id: id.to_owned(),
            role,
        })
        .collect()
}

/// One element of `crew`: its trimmed id and role, or `None` when it is left out.
fn element(element: &Value) -> Option<(&str, Role)> {
    match element {
        Value::String(id) => Some((crew_id(id)?, Role::Operating)),
        Value::Object(members) => {
            let mut id = None;
            let mut role = Role::Operating;
            for (name, value) in members {
                match (name.as_str(), value) {
                    ("id", Value::String(text)) => id = Some(crew_id(text)?),
                    ("id", _) => return None,
                    ("role", Value::String(text)) => role = Role::parse(text)?,
                    ("role", _) => return None,
                    _ => {}
                }
            }
            Some((id?, role))
        }
        _ => None,
    }
}

/// A crew id: trimmed of Unicode whitespace, then 1–64 characters from `!` to `~`.
pub fn crew_id(text: &str) -> Option<&str> {
    let trimmed = text.trim();
    let fits = (1..=CREW_ID_CHARS_MAX).contains(&trimmed.len())
        && trimmed.bytes().all(|byte| (b'!'..=b'~').contains(&byte));
    fits.then_some(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crew of `payload` as `id:role` texts, ordered by id.
    fn check(payload: &str, expected: &[&str]) {
        let found: Vec<String> = of_payload(payload)
            .iter()
            .map(|member| format!("{}:{}", member.id(), member.role().as_str()))
            .collect();
        assert_eq!(found, expected, "payload {payload}");
    }

    #[test]
    fn strings_are_operating_crew() {
        check(r#"{"crew":["C1","C2"]}"#, &["C1:operating", "C2:operating"]);
        check(r#"{"crew":["C2","C1"]}"#, &["C1:operating", "C2:operating"]);
        check(r#"{"crew":[]}"#, &[]);
    }

    #[test]
    fn objects_name_an_id_and_an_optional_role() {
        check(r#"{"crew":[{"id":"C1"}]}"#, &["C1:operating"]);
        check(
            r#"{"crew":[{"id":"C1","role":"operating"}]}"#,
            &["C1:operating"],
        );
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"}]}"#,
            &["C1:positioning"],
        );
        check(
            r#"{"crew":[{"base":"LHR","id":"C1","rank":"FO","role":"positioning"}]}"#,
            &["C1:positioning"],
        );
        check(
            r#"{"crew":["C1",{"id":"C2","role":"positioning"}]}"#,
            &["C1:operating", "C2:positioning"],
        );
    }

    #[test]
    fn elements_of_any_other_shape_are_left_out() {
        check(
            r#"{"crew":[1,null,true,["C1"],{"role":"operating"},"C2"]}"#,
            &["C2:operating"],
        );
        check(r#"{"crew":[{"id":7}]}"#, &[]);
        check(r#"{"crew":[{"id":null,"role":"operating"}]}"#, &[]);
        check(r#"{"crew":[{"id":["C1"]}]}"#, &[]);
        check(r#"{"crew":[{}]}"#, &[]);
    }

    #[test]
    fn an_unknown_or_non_string_role_leaves_the_element_out() {
        check(r#"{"crew":[{"id":"C1","role":"captain"}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":"Operating"}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":" operating"}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":null}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":1}]}"#, &[]);
        check(
            r#"{"crew":[{"id":"C1","role":"captain"},"C2"]}"#,
            &["C2:operating"],
        );
    }

    #[test]
    fn a_crew_that_is_not_an_array_gives_none() {
        check(r#"{"crew":"C1"}"#, &[]);
        check(r#"{"crew":{"id":"C1"}}"#, &[]);
        check(r#"{"crew":null}"#, &[]);
        check(r#"{"crew":3}"#, &[]);
        check(r#"{"tail":"G-XWBA"}"#, &[]);
        check("{}", &[]);
        check(r#"{"Crew":["C1"]}"#, &[]);
        check(r#"{"trip":{"crew":["C1"]}}"#, &[]);
    }

    #[test]
    fn ids_are_trimmed_then_checked() {
        check(
            r#"{"crew":[" C1 ","\tC2\n"]}"#,
            &["C1:operating", "C2:operating"],
        );
        // Unicode whitespace: no-break space, ideographic space, line separator.
        check(
            r#"{"crew":["\u00a0C1\u3000","\u2028C2"]}"#,
            &["C1:operating", "C2:operating"],
        );
        check(
            r#"{"crew":[{"id":"  C3  ","role":"positioning"}]}"#,
            &["C3:positioning"],
        );
        check(
            r#"{"crew":["","   ","C 1","C\u00e91","C\u00001","C\u007f"]}"#,
            &[],
        );
        let longest = "X".repeat(CREW_ID_CHARS_MAX);
        let longer = "X".repeat(CREW_ID_CHARS_MAX + 1);
        check(
            &format!(r#"{{"crew":["{longest}","{longer}"," {longest} "]}}"#),
            &[&format!("{longest}:operating")],
        );
        check(
            r#"{"crew":["!","~","a\\b","\"q\""]}"#,
            &[
                "!:operating",
                "\"q\":operating",
                "a\\b:operating",
                "~:operating",
            ],
        );
    }

    #[test]
    fn an_id_listed_twice_counts_once_operating_if_either_is() {
        check(r#"{"crew":["C1","C1"]}"#, &["C1:operating"]);
        check(r#"{"crew":["C1"," C1"]}"#, &["C1:operating"]);
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"},"C1"]}"#,
            &["C1:operating"],
        );
        check(
            r#"{"crew":["C1",{"id":"C1","role":"positioning"}]}"#,
            &["C1:operating"],
        );
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"},{"id":"C1","role":"positioning"}]}"#,
            &["C1:positioning"],
        );
        // A listing left out does not count, so it cannot make the id operating.
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"},{"id":"C1","role":"pilot"}]}"#,
            &["C1:positioning"],
        );
        // Ids differ in letter case: two crew members, as sent.
        check(r#"{"crew":["c1","C1"]}"#, &["C1:operating", "c1:operating"]);
    }

    #[test]
    fn a_payload_that_does_not_parse_gives_none() {
        check("", &[]);
        check(r#"{"crew":["C1""#, &[]);
        check(r#"["C1"]"#, &[]);
    }
}
