// swift-tools-version: 6.0
import PackageDescription

// Layers, dependencies pointing one way:
//   docfs (CLI) → DocfsDaemon (served store, control server, sync service) → DocfsFUSE (bridge) → DocfsFilesystem → {DocfsCoordination, DocfsIndex, DocfsProvider, DocfsThumbnails, DocfsSync} → {DocfsCore, DocfsChunks}
//   DocfsDaemon → DocfsSyncStore (the sync engine's store over the filesystem) → {DocfsFilesystem, DocfsSync}
// DocfsRemotePostgres (the PostgreSQL remote, beside DocfsSync's in-memory one) is used by the daemon and the CLI.
// Only DocfsFUSE imports CFuse (libfuse3) and CFusePassthrough (its C helpers for the kernel's
// FUSE passthrough); only DocfsIndex imports GRDB. CLinux wraps Linux syscalls Swift's Glibc hides;
// CGio is GLib's GIO, for content types from the system's shared-mime-info data; swift-crypto
// signs bookmarks (DocfsProvider) and names chunks (DocfsChunks: content-defined chunks, stored
// once, that kept versions are made of and the sync engine will upload). CVips (libvips) is imported only by DocfsThumbnails, whose
// renderer runs in the thumbnail worker process, never in the daemon.
let package = Package(
    name: "docfs",
    products: [
        .executable(name: "docfs", targets: ["docfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
    ],
    targets: [
        .systemLibrary(
            name: "CFuse",
            path: "Sources/CFuse",
            pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]
        ),
        .systemLibrary(
            name: "CGio",
            path: "Sources/CGio",
            pkgConfig: "gio-2.0",
            providers: [.apt(["libglib2.0-dev", "shared-mime-info"])]
        ),
        .systemLibrary(
            name: "CVips",
            path: "Sources/CVips",
            pkgConfig: "vips",
            providers: [.apt(["libvips-dev"])]
        ),
        .target(name: "CLinux", path: "Sources/CLinux"),
        .target(name: "CFusePassthrough", dependencies: ["CFuse"], path: "Sources/CFusePassthrough"),
        .target(
            name: "DocfsCore",
            dependencies: [
                .product(name: "SystemPackage", package: "swift-system"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Optimized in debug builds too: cutting content into chunks byte by byte is 30 times
        // slower unoptimized, and tests keep versions of megabytes.
        .target(name: "DocfsChunks", dependencies: [.product(name: "Crypto", package: "swift-crypto")],
                swiftSettings: [.unsafeFlags(["-O"])]),
        .target(name: "DocfsProvider", dependencies: ["DocfsCore", "DocfsChunks", "CLinux", "CGio", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "DocfsCoordination", dependencies: ["DocfsCore"]),
        // SQLite settings GRDB has no call for (sqlite3_db_config is variadic: Swift cannot call it).
        .target(name: "CIndexSQLite", path: "Sources/CIndexSQLite", linkerSettings: [.linkedLibrary("sqlite3")]),
        .target(name: "DocfsIndex", dependencies: ["DocfsCore", "CIndexSQLite", .product(name: "GRDB", package: "GRDB.swift")]),
        .target(name: "DocfsThumbnails", dependencies: ["DocfsCore", "CLinux", "CVips", .product(name: "Crypto", package: "swift-crypto")]),
        // The sync engine's side of many machines (DESIGN §9): the Remote interface and its
        // in-memory implementation; the PostgreSQL remote will be a target of its own.
        .target(name: "DocfsSync", dependencies: ["DocfsCore", "DocfsChunks", .product(name: "Crypto", package: "swift-crypto")]),
        // The PostgreSQL remote (DESIGN §9): the only target that imports the PostgreSQL client.
        .target(name: "DocfsRemotePostgres", dependencies: [
            "DocfsSync", "DocfsChunks",
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .target(name: "DocfsFilesystem", dependencies: ["DocfsCore", "DocfsCoordination", "DocfsIndex", "DocfsProvider", "DocfsThumbnails", "DocfsSync", "DocfsChunks", "CLinux"]),
        // The sync store: the engine's `SyncedStore` over a served store (reads, applies,
        // versions kept from other machines, a store's merge into a remote's).
        .target(name: "DocfsSyncStore", dependencies: ["DocfsCore", "DocfsCoordination", "DocfsIndex", "DocfsProvider", "DocfsThumbnails", "DocfsSync", "DocfsChunks", "DocfsFilesystem", "CLinux"]),
        .target(
            name: "DocfsFUSE",
            dependencies: ["CFuse", "CFusePassthrough", "DocfsFilesystem", .product(name: "Logging", package: "swift-log")]
        ),
        .target(
            name: "DocfsDaemon",
            dependencies: ["CLinux", "DocfsCoordination", "DocfsCore", "DocfsFUSE", "DocfsFilesystem", "DocfsIndex", "DocfsProvider",
                           "DocfsSync", "DocfsSyncStore", "DocfsRemotePostgres", .product(name: "Logging", package: "swift-log")]
        ),
        .executableTarget(
            name: "docfs",
            dependencies: [
                "DocfsDaemon",
                "DocfsFUSE",
                "DocfsSync",
                "DocfsRemotePostgres",
                "DocfsIndex",
                "DocfsThumbnails",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "DocfsFilesystemTests", dependencies: ["DocfsFilesystem", "DocfsSyncStore", "DocfsProvider", "DocfsCoordination", "DocfsIndex", "DocfsSync", "DocfsChunks", "CLinux", "DocfsTestSupport"]),
        .testTarget(name: "DocfsIndexTests", dependencies: ["DocfsIndex", "DocfsTestSupport"]),
        .testTarget(name: "DocfsChunksTests", dependencies: ["DocfsChunks"]),
        .testTarget(name: "DocfsProviderTests", dependencies: ["DocfsProvider", "DocfsTestSupport"]),
        .testTarget(name: "DocfsThumbnailsTests", dependencies: ["DocfsThumbnails"]),
        // The tests' own PostgreSQL server (scripts/throwaway-postgres), shared by the suites that need one.
        .target(name: "DocfsTestSupport", path: "Tests/DocfsTestSupport"),
        .testTarget(name: "DocfsSyncTests", dependencies: ["DocfsCore", "DocfsSync", "DocfsChunks", "DocfsRemotePostgres", "DocfsIndex", "DocfsFilesystem", "DocfsSyncStore", "DocfsTestSupport"]),
        .testTarget(name: "DocfsMountTests", dependencies: ["CLinux", "DocfsIndex", "DocfsProvider", "DocfsThumbnails", "DocfsTestSupport", .product(name: "Crypto", package: "swift-crypto")], exclude: ["Workloads"]),
    ],
    swiftLanguageModes: [.v6]
)
