//! Prompt templates: text with `{{ name }}` placeholders filled from the command's variables.
//!
//! Deliberately tiny: placeholders only, no logic. Every placeholder must name a declared
//! variable, which is checked when the command file is loaded, not when it runs.

use std::collections::BTreeMap;

/// A template that could not be checked or rendered.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TemplateError {
    #[error("unclosed '{{{{' at byte {at}")]
    Unclosed { at: usize },
    #[error("the placeholder {{{{ {name} }}}} names no variable")]
    Unknown { name: String },
}

/// The names of the placeholders in `template`, in order of appearance.
pub fn placeholders(template: &str) -> Result<Vec<&str>, TemplateError> {
    let mut names = Vec::new();
    let mut rest = template;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or(TemplateError::Unclosed { at: offset + open })?;
        names.push(after[..close].trim());
        let consumed = open + 2 + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    Ok(names)
}

/// `template` with every placeholder replaced by its value.
pub fn render(template: &str, values: &BTreeMap<String, String>) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    let mut offset = 0;
    while let Some(open) = rest.find("{{") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after
            .find("}}")
            .ok_or(TemplateError::Unclosed { at: offset + open })?;
        let name = after[..close].trim();
        let value = values.get(name).ok_or_else(|| TemplateError::Unknown {
            name: name.to_owned(),
        })?;
        out.push_str(value);
        let consumed = open + 2 + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_placeholders_with_or_without_spaces() {
        let values = BTreeMap::from([("topic".to_owned(), "the sea".to_owned())]);
        assert_eq!(
            render("About {{topic}} and {{ topic }}.", &values).unwrap(),
            "About the sea and the sea."
        );
        assert_eq!(placeholders("a {{ x }} b {{y}}").unwrap(), vec!["x", "y"]);
    }

    #[test]
    fn reports_unknown_and_unclosed_placeholders() {
        let values = BTreeMap::new();
        assert_eq!(
            render("{{ nope }}", &values),
            Err(TemplateError::Unknown {
                name: "nope".into()
            })
        );
        assert_eq!(
            render("ok {{ nope", &values),
            Err(TemplateError::Unclosed { at: 3 })
        );
    }
}
