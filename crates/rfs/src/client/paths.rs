//! Paths of the export: components checked here before they go on the
//! wire, looked up one directory at a time from the export's root.

use super::{remote, unexpected, Client};
use crate::error::ClientError;
use crate::protocol::{validate_name, Attr, Handle, Kind, Reply, Request};

impl Client {
    // -- paths ---------------------------------------------------------------

    fn components(path: &str) -> Result<Vec<&str>, ClientError> {
        let mut parts = Vec::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            validate_name(part.as_bytes()).map_err(|e| ClientError::BadPath {
                path: path.to_string(),
                why: e.to_string(),
            })?;
            parts.push(part);
        }
        Ok(parts)
    }

    fn lookup(
        &mut self,
        dir: Handle,
        name: &str,
        path: &str,
    ) -> Result<(Handle, Attr), ClientError> {
        let server = self.server;
        self.call(
            &Request::Lookup {
                dir,
                name: name.as_bytes(),
            },
            false,
            |r| match r {
                Ok(Reply::Handle { handle, attr }) => Ok((handle, attr)),
                Ok(_) => Err(unexpected(server, "lookup")),
                Err(error) => Err(remote(server, format!("looking up \"{path}\""), error)),
            },
        )
    }

    pub(super) fn getattr(&mut self, handle: Handle, path: &str) -> Result<Attr, ClientError> {
        let server = self.server;
        self.call(&Request::Getattr { handle }, false, |r| match r {
            Ok(Reply::Attr(a)) => Ok(a),
            Ok(_) => Err(unexpected(server, "getattr")),
            Err(error) => Err(remote(server, format!("stat of \"{path}\""), error)),
        })
    }

    /// The handle and attributes of `path`.
    pub(super) fn walk(&mut self, path: &str) -> Result<(Handle, Attr), ClientError> {
        let parts = Self::components(path)?;
        if parts.is_empty() {
            let attr = self.getattr(self.root, "/")?;
            return Ok((self.root, attr));
        }
        let mut handle = self.root;
        let mut attr = None;
        for (i, part) in parts.iter().enumerate() {
            if let Some(a) = attr {
                let a: Attr = a;
                if a.kind != Kind::Dir {
                    return Err(ClientError::BadPath {
                        path: path.to_string(),
                        why: format!(
                            "\"{}\" is a {}, not a directory",
                            parts[..i].join("/"),
                            a.kind.name()
                        ),
                    });
                }
            }
            let (h, a) = self.lookup(handle, part, path)?;
            handle = h;
            attr = Some(a);
        }
        Ok((
            handle,
            attr.unwrap_or_else(|| unreachable!("parts is not empty")),
        ))
    }

    /// The directory handle of `path`'s parent and the last name.
    pub(super) fn walk_parent<'p>(
        &mut self,
        path: &'p str,
    ) -> Result<(Handle, &'p str), ClientError> {
        let parts = Self::components(path)?;
        let Some((&name, dirs)) = parts.split_last() else {
            return Err(ClientError::BadPath {
                path: path.to_string(),
                why: "it names the export's root; a file name is needed".into(),
            });
        };
        let dir = if dirs.is_empty() {
            self.root
        } else {
            let dir_path = dirs.join("/");
            let (h, a) = self.walk(&dir_path)?;
            if a.kind != Kind::Dir {
                return Err(ClientError::BadPath {
                    path: path.to_string(),
                    why: format!("\"{dir_path}\" is a {}, not a directory", a.kind.name()),
                });
            }
            h
        };
        Ok((dir, name))
    }
}
