"""The CLI as a whole: errors, bad inputs, inspect, printed commands, the docs' commands and links, layers."""
