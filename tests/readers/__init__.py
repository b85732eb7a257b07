"""What each engine reads: the reader table and the engine claims."""
