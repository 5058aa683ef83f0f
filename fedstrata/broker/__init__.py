"""Real MQTT transport: asyncio node runner on aiomqtt."""
