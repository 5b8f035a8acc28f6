"""harnessrl: harnessed agentic RL (command line and shared provisioning)."""
