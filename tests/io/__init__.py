"""Files and the OS: the GGUF reader, output safety, hub resolution, real disks and permissions."""
