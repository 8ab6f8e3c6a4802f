"""The sans-IO GSN endpoint core, shared by gsnd and pktwayd's twin link."""
