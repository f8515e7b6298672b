"""Graph files (.tfg): the attribute codec, the writer, and the reader that checks
untrusted files. docs/file-formats.md describes the format."""
