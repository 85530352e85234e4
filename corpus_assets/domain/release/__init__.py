"""Release specs, the build id and its inputs, the manifest and data card, publishing (Algorithm 18.3), the registry, signing, the object-store mirror."""
