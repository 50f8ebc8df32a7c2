package main

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"
