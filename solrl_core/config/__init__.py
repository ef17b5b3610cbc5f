"""solrl_core/config/schema."""
