#compdef streamctl

_streamctl_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _STREAMCTL_COMPLETE=complete_zsh streamctl)
}

compdef _streamctl_completion streamctl
