//! An ACP prompt's content blocks as the one prompt text a reel run takes: text as it is, the
//! editor's embedded context (a file's contents) in a tagged block the model can tell apart,
//! links as their URI.

use agent_client_protocol::{
    Error,
    v1::schema::{ContentBlock, EmbeddedResourceResource},
};

/// The prompt text of `blocks`; an image, audio or binary resource is refused (the agent does
/// not advertise them).
pub fn prompt_text(blocks: &[ContentBlock]) -> Result<String, Error> {
    let mut parts = Vec::with_capacity(blocks.len());
    for block in blocks {
        parts.push(match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::ResourceLink(link) => format!("[{}]({})", link.name, link.uri),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(contents) => format!(
                    "<context uri=\"{}\">\n{}\n</context>",
                    contents.uri, contents.text
                ),
                _ => return Err(refused("binary resources")),
            },
            ContentBlock::Image(_) => return Err(refused("images")),
            ContentBlock::Audio(_) => return Err(refused("audio")),
            _ => return Err(refused("this kind of content")),
        });
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(Error::invalid_params().data(serde_json::json!("the prompt is empty")));
    }
    Ok(text)
}

fn refused(what: &str) -> Error {
    Error::invalid_params().data(serde_json::json!(format!(
        "reel takes text, resource links and embedded text context; not {what}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_tagged_and_images_refused() {
        let blocks: Vec<ContentBlock> = serde_json::from_value(serde_json::json!([
            {"type": "text", "text": "explain"},
            {"type": "resource", "resource": {"uri": "file:///a.rs", "text": "fn main() {}"}},
        ]))
        .unwrap();
        assert_eq!(
            prompt_text(&blocks).unwrap(),
            "explain\n\n<context uri=\"file:///a.rs\">\nfn main() {}\n</context>"
        );
        let image: Vec<ContentBlock> = serde_json::from_value(serde_json::json!([
            {"type": "image", "data": "AA==", "mimeType": "image/png"},
        ]))
        .unwrap();
        assert!(prompt_text(&image).is_err());
        assert!(prompt_text(&[]).is_err());
    }
}
