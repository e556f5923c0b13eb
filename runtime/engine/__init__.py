"""Layer 4: executing runs — scheduler, run loop, attempts, node context, effect journal."""
