//! Which command file a served session runs, and with which variable values: the server's
//! `--command`, or one a new session names in `--commands DIR` (a name, never a path). The
//! choice is the session's first event (`ChatSessionConfigured`), so every later load of the
//! session, on any server, runs the same command with the same values.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

use reel_engine::{LogPages, SessionCatalog};
use reel_proto::{Any, chat::ChatSessionConfigured};
use reel_server::{SessionConfig, SourceError};

use crate::command_file::CommandFile;

/// The command files a server's sessions may run.
pub struct Commands {
    /// `--command`: what a session runs when it names none.
    pub default: Option<PathBuf>,
    /// `--commands DIR`: the ones a session may name.
    pub folder: Option<PathBuf>,
}

/// A command chosen for a session, loaded, with every variable's value.
pub struct Chosen {
    pub path: PathBuf,
    pub file: CommandFile,
    pub variables: BTreeMap<String, String>,
}

impl Commands {
    /// Every command file this server may run (to check them all at start): the default, then
    /// the folder's `*.yaml`/`*.yml` by name.
    pub fn all(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut paths: Vec<PathBuf> = self.default.iter().cloned().collect();
        if let Some(folder) = &self.folder {
            let mut named = Vec::new();
            for entry in std::fs::read_dir(folder)? {
                let path = entry?.path();
                if path.is_file() && is_command_file(&path) {
                    named.push(path);
                }
            }
            named.sort();
            paths.extend(named);
        }
        Ok(paths)
    }

    /// The command `config` names, with its variables checked and their defaults filled in.
    pub fn choose(&self, config: &SessionConfig) -> Result<Chosen, SourceError> {
        let path = self.path_of(config.command.as_deref())?;
        let file = CommandFile::load(&path).map_err(|e| SourceError::Failed(e.to_string()))?;
        let variables = values(&file, &config.variables)?;
        Ok(Chosen {
            path,
            file,
            variables,
        })
    }

    /// The file command `name` is, or the default command's for `None`.
    fn path_of(&self, name: Option<&str>) -> Result<PathBuf, SourceError> {
        let Some(name) = name else {
            return self.default.clone().ok_or_else(|| {
                SourceError::InvalidCommand(format!(
                    "this server has no default command: name one ({})",
                    self.names()
                ))
            });
        };
        let folder = self.folder.as_ref().ok_or_else(|| {
            SourceError::InvalidCommand(format!(
                "this server runs one command (no --commands folder); {name:?} is not it"
            ))
        })?;
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
        let found = ["", ".yaml", ".yml"]
            .iter()
            .map(|extension| folder.join(format!("{name}{extension}")))
            .find(|path| path.is_file() && is_command_file(path));
        match found {
            Some(path) if plain => Ok(path),
            _ => Err(SourceError::InvalidCommand(format!(
                "there is no command {name:?} ({})",
                self.names()
            ))),
        }
    }

    /// The names a session may ask for, for messages.
    fn names(&self) -> String {
        let names: Vec<String> = self
            .all()
            .unwrap_or_default()
            .iter()
            .filter(|path| Some(*path) != self.default.as_ref())
            .filter_map(|path| Some(path.file_stem()?.to_string_lossy().into_owned()))
            .collect();
        match names.is_empty() {
            true => "none can be named here".into(),
            false => format!("the commands are {}", names.join(", ")),
        }
    }
}

fn is_command_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Every variable of `file` with its value: `given`, else its default. A value for a variable
/// the command does not have, or none for one without a default, is refused.
fn values(
    file: &CommandFile,
    given: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, SourceError> {
    if let Some(unknown) = given
        .keys()
        .find(|name| !file.variables.iter().any(|v| &v.name == *name))
    {
        let known: Vec<&str> = file.variables.iter().map(|v| v.name.as_str()).collect();
        return Err(SourceError::InvalidCommand(format!(
            "command {:?} has no variable {unknown:?} (it has: {})",
            file.name,
            known.join(", ")
        )));
    }
    file.variables
        .iter()
        .map(|variable| {
            let value = given
                .get(&variable.name)
                .or(variable.default.as_ref())
                .ok_or_else(|| {
                    SourceError::InvalidCommand(format!(
                        "command {:?} needs a value for its variable {:?}",
                        file.name, variable.name
                    ))
                })?;
            Ok((variable.name.clone(), value.clone()))
        })
        .collect()
}

/// The event that records `config` (its command's values filled in) and the working
/// directory `cwd` its command tools run in.
pub fn configured_event(config: &SessionConfig, chosen: &Chosen, cwd: Option<&Path>) -> Any {
    Any::from(ChatSessionConfigured {
        command: config.command.clone().unwrap_or_default(),
        variables: chosen.variables.clone(),
        cwd: cwd
            .map(|dir| dir.to_string_lossy().into_owned())
            .unwrap_or_default(),
    })
}

/// How a session was created: its first event, when that records it.
#[derive(Default)]
pub struct Recorded {
    pub config: SessionConfig,
    /// Where its command tools run; `None` for the process's own directory.
    pub cwd: Option<PathBuf>,
}

/// How session `id` was created (sessions `run-command` made run the default command with its
/// defaults, in the process's directory).
pub async fn recorded(store: &mut dyn SessionCatalog, id: &str) -> Result<Recorded, SourceError> {
    let first = LogPages::new(id, 0, 1)
        .next(store)
        .await
        .map_err(|e| SourceError::Failed(reel_engine::error_chain(&e)))?;
    Ok(match first.first().map(|entry| &entry.event) {
        Some(Any::ChatSessionConfigured(configured)) => Recorded {
            config: SessionConfig {
                command: Some(configured.command.clone()).filter(|name| !name.is_empty()),
                variables: configured.variables.clone(),
            },
            cwd: (!configured.cwd.is_empty()).then(|| PathBuf::from(&configured.cwd)),
        },
        _ => Recorded::default(),
    })
}
