"""Input and output: atomic files and staged folders (``files``), signals, the Hugging Face cache rules
(``hub_cache``), ownership of what ropectl wrote, model resolution, and GGUF key/value metadata."""
