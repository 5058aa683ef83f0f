"""Sans-IO node state machines: clients and aggregators at any tier."""
