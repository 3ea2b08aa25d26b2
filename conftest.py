"""Repository-level pytest configuration: enables ``pytester`` for the plugin's own tests."""

pytest_plugins = ["pytester"]
